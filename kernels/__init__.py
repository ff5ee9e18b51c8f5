"""The kernel layer of zorch_nb (installed as ``zorch_nb.kernels``).

Plain arrays in, ``out`` arrays written; no validation, no allocation inside a
kernel, no objects.  Field constants come from :mod:`.field_params`, scalar
Montgomery arithmetic from :mod:`.monty` (Numba) and ``cuda/monty.cuh`` (CUDA C).
Nothing here imports from the object layer (``zorch_nb``).
"""
