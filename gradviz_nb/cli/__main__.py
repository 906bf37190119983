"""``python -m gradviz_nb.cli`` (the same as ``gradviz``)."""

import sys

from gradviz_nb.cli.main import main

if __name__ == "__main__":  # imported (pkgutil.walk_packages, docs tools): nothing runs
    sys.exit(main())
