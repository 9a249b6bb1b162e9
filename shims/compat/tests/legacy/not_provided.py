"""Every "not provided" row of the mapping, imported as old code does: each must raise NotProvidedError saying why."""

import importlib.util

from verl_compat._serve import NotProvidedError
from verl_migrate import imports_map

wrong = []
for module, names in sorted(imports_map.name_rows().items()):
    for name, row in sorted(names.items()):
        if not row.missing:
            continue
        try:
            exec(f"from {module} import {name}", {})
        except NotProvidedError as e:
            if f"because {row.missing}" not in str(e):
                wrong.append(f"{module}:{name}: message without the reason: {e}")
        except ModuleNotFoundError as e:  # upstream verl modules that need vllm where vllm is absent
            if (e.name or "").partition(".")[0] != "vllm" or importlib.util.find_spec("vllm") is not None:
                wrong.append(f"{module}:{name}: {type(e).__name__}: {e}")
        except Exception as e:  # the report names what was raised instead
            wrong.append(f"{module}:{name}: {type(e).__name__}: {e}")
        else:
            wrong.append(f"{module}:{name}: imported, but the mapping says it is not provided")
print("\n".join(wrong) or "OK")
