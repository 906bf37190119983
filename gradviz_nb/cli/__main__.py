"""``python -m gradviz_nb.cli`` (the same as ``gradviz``)."""

import sys

from gradviz_nb.cli.main import main

sys.exit(main())
