"""The Textual UI. Imports no torch: models load lazily inside a worker thread
(see :mod:`specchat.ui.backend`)."""
