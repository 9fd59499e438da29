"""Sphinx glue for this book: a chapter's Colab button opens its lab notebook.

The theme points a page's Colab button at the page's own source, but Colab opens only .ipynb
and the chapters are MyST Markdown. A chapter names its lab in its front matter
(``lab: labs/01_averaging.ipynb``) and its button opens that notebook instead; a Markdown page
without a lab gets no Colab button rather than a broken one.
"""

import re


def setup(app):
    # After sphinx-book-theme's add_launch_buttons (default priority 500).
    app.connect("html-page-context", point_colab_at_lab, priority=600)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


def point_colab_at_lab(app, pagename, templatename, context, doctree):
    lab = app.env.metadata.get(pagename, {}).get("lab")
    is_markdown = str(app.env.doc2path(pagename)).endswith(".md")
    for group in context.get("header_buttons", []):
        if group.get("label") != "launch-buttons":
            continue
        for button in list(group["buttons"]):
            if button.get("text") != "Colab":
                continue
            if lab:
                button["url"] = re.sub(r"(/blob/[^/]+/).*$", lambda m: m.group(1) + lab,
                                       button["url"])
                button["tooltip"] = "Open this chapter's lab in Colab"
            elif is_markdown:
                group["buttons"].remove(button)
