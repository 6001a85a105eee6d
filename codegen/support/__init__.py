"""Hand-written support modules of the generated kernels: the speed idioms, named.

`numpy_support.py` and `torch_support.py` are copied verbatim into generated/<backend>/_support.py
by `python -m codegen`; the printers call their functions by name (`_support.rowmean(x)`), so
that a kernel reads like its formula while each sum is still computed the fast way.
"""
