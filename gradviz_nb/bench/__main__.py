"""``python -m gradviz_nb.bench``: print the overhead table (see :mod:`gradviz_nb.bench`)."""

from gradviz_nb.bench import main

if __name__ == "__main__":
    main()
