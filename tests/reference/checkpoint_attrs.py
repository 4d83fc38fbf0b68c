"""Root attributes of a megatron-app checkpoint as Python values, whichever HDF5 string kind."""


def config_text(f):
    """The resolved config (TOML) a checkpoint stores: a fixed-length UTF-8 string attribute since
    the fuzzing work (older files: variable-length, which h5py gives as str)."""
    value = f.attrs["config"]
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)
