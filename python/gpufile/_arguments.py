"""The error of a ``set()`` given other arguments than it takes, shared by ``defaults.set`` and
``cufile_driver.set``."""


class SetArgumentsError(TypeError, ValueError):
    """``set`` called with other than a dict or a name and a value (KvikIO: ValueError)."""
