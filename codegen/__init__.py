"""svod_min's code-generation build step (build time only; needs jinja2).

``python -m codegen`` renders templates/ into svod_min/kernels/_generated
(C and CUDA sources, the ctypes signature module, the elementwise skeleton),
compiles the prebuilt objects (svod_min/kernels/prebuilt/<variant>/) and the
PTX modules, and refreshes the catalogue tables in docs/kernels.md.
``python -m codegen --check`` does the same into a temporary directory and
fails listing every committed file that differs. See docs/kernels.md.
"""
