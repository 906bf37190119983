"""Pure functions over AutogradGraph (and torch where they must re-run): what-if, recording, flow."""
