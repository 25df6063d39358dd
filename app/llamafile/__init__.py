"""Llamafiles as model files: the GGUF an executable carries in its archive, measured without a copy
(``views``), unpacked once for another engine (``extract``), its ``.args`` read as the settings a plan
starts from (``args``), and written anew from a plan (``save``).

The archive itself is read by the planner's GGUF reader (app/planner/gguf/reader.py,
``read_llamafile``): a member is named as a path, ``Model.llamafile/zip/model.gguf``, everywhere a
GGUF's path goes (docs/llamafiles.md).
"""
