"""``python -m gradviz_nb doctor train.py``: the ``gradviz`` command (:mod:`gradviz_nb.cli`)."""

import sys

from gradviz_nb.cli.main import main

sys.exit(main())
