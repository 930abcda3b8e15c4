"""The web viewer and operator console (`station serve`) and the static export (`station export`)."""
