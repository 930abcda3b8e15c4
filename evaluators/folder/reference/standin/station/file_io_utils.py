"""The reference station's file helpers that its task evaluators call: directories, text, YAML and
YAML-lines files (YAML documents separated by ---). Plain writes: the scorer's run is the only
writer of its scratch folder."""

from __future__ import annotations

import os
from typing import Any

import yaml


def ensure_dir_exists(dir_path: str) -> None:
    if os.path.exists(dir_path) and not os.path.isdir(dir_path):
        raise OSError(f"{dir_path} exists and is not a directory")
    os.makedirs(dir_path, exist_ok=True)


def file_exists(file_path: str) -> bool:
    return os.path.isfile(file_path)


def dir_exists(dir_path: str) -> bool:
    return os.path.isdir(dir_path)


def delete_file(file_path: str) -> bool:
    if not os.path.isfile(file_path):
        return False
    os.remove(file_path)
    return True


def list_files(dir_path: str, extension: str | None = None) -> list[str]:
    if not os.path.isdir(dir_path):
        return []
    names = [n for n in os.listdir(dir_path) if os.path.isfile(os.path.join(dir_path, n))]
    return [n for n in names if n.endswith(extension)] if extension else names


def list_subdirectories(dir_path: str) -> list[str]:
    return [n for n in os.listdir(dir_path) if os.path.isdir(os.path.join(dir_path, n))]


def load_text(file_path: str) -> str | None:
    if not os.path.isfile(file_path):
        return None
    with open(file_path, encoding="utf-8") as f:
        return f.read()


def save_text(content: str, file_path: str) -> None:
    _parent(file_path)
    with open(file_path, "w", encoding="utf-8") as f:
        f.write(content)


def load_yaml(file_path: str) -> Any:
    text = load_text(file_path)
    try:
        return yaml.safe_load(text) if text else None
    except yaml.YAMLError:
        return None


def save_yaml(data: Any, file_path: str, default_flow_style: bool | None = False, sort_keys: bool = False) -> None:
    save_text(yaml.safe_dump(data, default_flow_style=default_flow_style, sort_keys=sort_keys), file_path)


def atomic_write_yaml(
    file_path: str, data: Any, default_flow_style: bool | None = False, sort_keys: bool = False
) -> None:
    save_yaml(data, file_path, default_flow_style, sort_keys)


def load_yaml_lines(file_path: str) -> list[dict[str, Any]]:
    text = load_text(file_path)
    if not text:
        return []
    try:
        return [doc for doc in yaml.safe_load_all(text) if isinstance(doc, dict)]
    except yaml.YAMLError:
        return []


def append_yaml_line(data: dict[str, Any], file_path: str) -> None:
    _parent(file_path)
    exists = os.path.isfile(file_path) and os.path.getsize(file_path) > 0
    with open(file_path, "a", encoding="utf-8") as f:
        f.write(("---\n" if exists else "") + yaml.safe_dump(data, sort_keys=False))


def _parent(file_path: str) -> None:
    folder = os.path.dirname(file_path)
    if folder:
        os.makedirs(folder, exist_ok=True)


def __getattr__(name: str) -> Any:
    raise AttributeError(
        f"station.file_io_utils.{name} is not among the reference station's helpers this station stands in for "
        "(evaluators/folder/reference/standin/station/file_io_utils.py)"
    )
