"""Sphinx glue for this book: its repository button and Colab buttons point at the repository
pyproject.toml names (``ddplab.common.home``), a chapter's Colab button opens its lab notebook,
formulas render with a MathJax copy shipped in the build, so that no page fetches anything, and
every figure says what it shows and links to itself at full size, and an index entry at a
section's top opens that section from the search.

The theme points a page's Colab button at the page's own source, but Colab opens only .ipynb
and the chapters are MyST Markdown. A chapter names its lab in its front matter
(``lab: labs/01_averaging.ipynb``) and its button opens that notebook instead; a Markdown page
without a lab gets no Colab button rather than a broken one.
"""

import importlib.util
import pathlib
import posixpath
import re
import shutil

from docutils import nodes
from sphinx import addnodes
from sphinx.util.osutil import relative_uri

# What MathJax's tex-mml-chtml component needs beside itself: its CHTML fonts, and the
# extensions, accessibility and menu parts it loads on demand (relative to the script's URL).
MATHJAX_PARTS = ("tex-mml-chtml.js", "input", "output/chtml", "a11y", "sre", "ui", "adaptors")


def setup(app):
    # After sphinx-book-theme's add_launch_buttons (default priority 500).
    app.connect("html-page-context", point_colab_at_lab, priority=600)
    app.connect("config-inited", repository_from_home)
    app.connect("config-inited", use_local_mathjax)
    app.connect("config-inited", one_search_box)
    app.connect("build-finished", copy_mathjax)
    app.connect("doctree-resolved", describe_and_link_figures)
    app.connect("doctree-resolved", index_entries_open_their_section)
    app.connect("env-get-outdated", reread_pages_with_index_entries)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


def mathjax_source() -> pathlib.Path:
    """MathJax 3's es5 build, as the package django-static-mathjax ships it (no Django needed:
    it is the plain MathJax distribution under mathjax/static/mathjax)."""
    spec = importlib.util.find_spec("mathjax")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the book needs MathJax's files: pip install django-static-mathjax")
    return pathlib.Path(list(spec.submodule_search_locations)[0]) / "static" / "mathjax" / "es5"


def repository_from_home(app, config):
    """The repository the book's buttons link to (its repository button, the Colab and
    source links sphinx-book-theme makes from it) is the one pyproject.toml names, read by
    ddplab itself: _config.yml names none, so that a fork changes one line."""
    from ddplab.common import home

    config.html_theme_options["repository_url"] = home.repository()
    config.html_theme_options["use_repository_button"] = True


def use_local_mathjax(app, config):
    """Sphinx puts MathJax only on pages with math, from a CDN by default; a relative path is
    served from the build's own _static folder instead."""
    config.mathjax_path = "mathjax/tex-mml-chtml.js"


def one_search_box(app, config):
    """pydata-sphinx-theme 0.17 fills an unset ``navbar_persistent`` with its search field
    (``update_config``), which puts a second, otherwise empty header bar with a search box
    above the sidebar's own. sphinx-book-theme means it empty (its theme.conf), so say so."""
    config.html_theme_options.setdefault("navbar_persistent", [])


def copy_mathjax(app, exception):
    if exception is not None or app.builder.format != "html":
        return
    source, target = mathjax_source(), pathlib.Path(app.outdir) / "_static" / "mathjax"
    for part in MATHJAX_PARTS:
        if (source / part).is_dir():
            shutil.copytree(source / part, target / part, dirs_exist_ok=True)
        else:
            target.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source / part, target / part)


def point_colab_at_lab(app, pagename, templatename, context, doctree):
    """A chapter's Colab button opens its lab; a Markdown page without a lab gets none, and
    no launch menu at all once the menu has no button left (the theme would show an empty
    one)."""
    lab = app.env.metadata.get(pagename, {}).get("lab")
    is_markdown = str(app.env.doc2path(pagename)).endswith(".md")
    for group in list(context.get("header_buttons", [])):
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
        if not group["buttons"]:  # the launch menu, emptied
            context["header_buttons"].remove(group)


def describe_and_link_figures(app, doctree, docname):
    """Every figure's image: its caption as alt text (without one Sphinx writes the image's
    file path there, which a screen reader reads out), and a link to the image file, so that a
    reader on a phone, where the page shows the figure at the screen's width, can open it at
    its own size. Sphinx links only images given a size (``html_scaled_image_link``); this does
    the same for the rest, with the image's name in the build's ``_images`` folder."""
    if app.builder.format != "html":
        return
    images = relative_uri(app.builder.get_target_uri(docname), "_images")
    for image in list(doctree.findall(nodes.image)):
        figure = next((a for a in _ancestors(image) if isinstance(a, nodes.figure)), None)
        caption = next(iter(figure.findall(nodes.caption)), None) if figure else None
        if caption is not None:
            image["alt"] = " ".join(caption.astext().split())
        if isinstance(image.parent, nodes.reference) or image["uri"] not in app.env.images:
            continue  # linked already, or not a file of the book (a data: URI)
        link = nodes.reference("", "", internal=True, classes=["image-reference"],
                               refuri=posixpath.join(images, app.env.images[image["uri"]][1]))
        image.replace_self(link)
        link.append(image)


def _ancestors(node):
    while node.parent is not None:
        node = node.parent
        yield node


def index_entries_open_their_section(app, doctree, docname):
    """Index entries written in a section, outside any paragraph (```{index} speedup, slower```
    under its heading), name what the section answers: each becomes a main entry pointing at
    the section itself, not at the directive's own target below the heading. The book's search
    lists a main entry that nearly equals the query first (``searchtools.js``, Sphinx 7.4: score
    100 against 15 for a word in a title; an entry not main is listed after every other
    result, and ``!`` makes only the first entry of a line main), and its link then opens the
    page at the section's heading. Rewritten before the page is fed to the search index
    (``index_page``)."""
    for node in doctree.findall(addnodes.index):
        section = node.parent
        if not isinstance(section, nodes.section) or not section["ids"]:
            continue
        node["entries"] = [(kind, value, section["ids"][0], "main", key)
                           for kind, value, _, _, key in node["entries"]]


def reread_pages_with_index_entries(app, env, added, changed, removed):
    """Pages with index entries are read and written on every build: Sphinx 7.4 keeps no page's
    index entries from one build's search index to the next (``IndexBuilder.load`` restores
    titles and words only), so an unchanged page not written again would drop out of the
    search's index entries (seen here: 52 entries after a full build, 29 after one that wrote
    two pages). Their notebooks come from the execution cache."""
    return [doc for doc in env.found_docs - added - changed - removed
            if "```{index}" in pathlib.Path(env.doc2path(doc)).read_text()]
