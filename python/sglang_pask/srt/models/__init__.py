"""SGLang's model registry, narrowed to the families the project serves (a start-up speed-up).

SGLang imports all of its ~260 model modules when its registry loads (about 2.5 s of CPU in every
scheduler process, and one "Ignore import error" line per module that needs a GPU-only kernel).
With ``$SGLANG_EXTERNAL_MODEL_PACKAGE`` naming a package, its registry imports that package's
modules only and defers the rest (``sglang.srt.models.registry``): an architecture it does not
find there loads every default module, as stock, so any model SGLang serves still loads. The
launcher sets the variable to this package unless the user set it.

Invariant: every module here re-exports the ``EntryClass`` of the SGLang module of the same name,
unchanged (the same classes SGLang would pick); nothing else.
"""
