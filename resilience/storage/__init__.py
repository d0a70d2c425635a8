"""The one I/O seam every checkpoint byte goes through, and the default local filesystem behind it."""

from .base import FileSystem, WriteStream, write_all
from .local import LocalFileSystem
from .seam import current, use

__all__ = ["FileSystem", "LocalFileSystem", "WriteStream", "current", "use", "write_all"]
