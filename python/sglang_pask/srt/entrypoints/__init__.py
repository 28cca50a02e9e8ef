"""The HTTP process: what a client sends is checked and tagged here, before the scheduler sees it
(SGLang's ``srt/entrypoints``)."""
