"""Files: atomic directory and file writes, the model-directory format, JSON helpers.
Knows nothing of the estimator, Ray or MLflow."""
from .atomic import (atomic_directory, check_room, check_writable, refuse_foreign_output, refuse_overwrite, write_dataset,
                     write_run_output, write_text_atomic)
from .modeldir import read_model_dir, write_model_dir
from .serialize import jsonable

__all__ = ["atomic_directory", "check_room", "check_writable", "jsonable", "refuse_foreign_output", "refuse_overwrite",
           "read_model_dir", "write_model_dir", "write_dataset", "write_run_output", "write_text_atomic"]
