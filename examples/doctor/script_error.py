"""Bad (script-error): the script itself fails; the doctor shows the tail of the traceback."""


def load_config(path):
    raise FileNotFoundError(f"no config at {path}")


config = load_config("missing.yaml")
