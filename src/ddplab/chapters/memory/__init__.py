"""Chapter 7, memory (``book/memory.md``): what each rank holds, why DDP runs out of it, and
when ZeRO or FSDP helps."""
