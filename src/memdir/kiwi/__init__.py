"""The KiwiFS memory report and its Go-style JSON."""
