"""The gateway process: configuration, starting models and workers, supervising workers, draining on SIGTERM."""
