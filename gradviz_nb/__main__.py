"""``python -m gradviz_nb doctor train.py``: the ``gradviz`` command (:mod:`gradviz_nb.cli`)."""

import sys

from gradviz_nb.cli.main import main

if __name__ == "__main__":  # imported (pkgutil.walk_packages, docs tools): nothing runs
    sys.exit(main())
