"""Imported by the worker's `__main__` before torch: while `python -m backends.worker` starts, Python's automatic
garbage collection is off; `main()` collects once when the model is loaded, freezes what lives on, and turns it
back on before serving.

The start allocates a few hundred thousand objects that all live on (torch's and xgrammar's modules, the model), so
each full collection the allocation count sets off walks them all for no garbage: about 0.4 CPU-s of a ~3 CPU-s
worker start (bench/RESULTS.md, "gateway serve start-up CPU, session 15"). A process that merely imports the module
(a test) keeps its collection.
"""

import gc
import sys

if getattr(getattr(sys.modules.get("__main__"), "__spec__", None), "name", None) == "backends.worker.__main__":
    gc.disable()
