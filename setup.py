"""What the build does beyond pyproject.toml, which configures everything else.

* It records the commit a package is built from: a wheel built from a git checkout (`make wheel`,
  `pip install git+URL@TAG`, `pip install ./semcheck`) carries `semcheck/COMMIT` with that
  checkout's short hash (`+dirty` with changes), which `semcheck --version` prints without needing
  git (src/semcheck/_commit.py, REP-33). An editable install records nothing: it asks git at run time.
* An editable install (`make demo`) prints nothing (REP-35): setuptools ends one of this layout
  (packages mapped from src/, model/, checker/) with an information-only notice, "Editable
  installation", which says that a folder named like the package in the working directory may take
  precedence on import. There is none (the package's folder is src/semcheck), so that one notice is
  filtered, by its category and its first words; every other warning and every error still shows.
"""

import importlib.util
import warnings
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.warnings import InformationOnly

warnings.filterwarnings("ignore", message=r"Editable installation\.", category=InformationOnly)

ROOT = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("_semcheck_commit", ROOT / "src" / "semcheck" / "_commit.py")
_commit = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_commit)


class BuildPyWithCommit(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        found = _commit.git_commit(ROOT, "src/semcheck/_commit.py")
        (Path(self.build_lib) / "semcheck" / _commit.RECORD).write_text((found or "") + "\n", encoding="utf-8")


setup(cmdclass={"build_py": BuildPyWithCommit})
