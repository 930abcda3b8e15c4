"""Where a model config would send an API key, and whether the station already sends it there.

A model config read from an operator (a spawn, a `station set` of a model's `base_url` or
`options`) names its key only by variable (`api_key_env`, or the provider's default) and may name
any server (`base_url`, or a URL, proxy or endpoint in `options`, e.g. Gemini's `http_options`).
Together they could carry a key the station holds to a server of someone else's choosing. So
such a model is accepted only where every (key variable, endpoint) pair it would use is one the
station's config already uses; a new pair needs `--allow-new-endpoint` on the command line, and
the web console never allows it.
A model with no custom endpoint sends its key to its provider's own API, which is fine.
In the same way, a replayed model reads its `replay_file` (shown to whoever reads its dialogue):
a file the station's config does not already replay needs the same flag.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any
from urllib.parse import urlsplit

from station.core.config import AgentSpec, ModelConfig, StationConfig, parse_config
from station.models.fallback import endpoint_configs
from station.models.remote import DEFAULT_KEY_ENV

ALLOW_FLAG = "--allow-new-endpoint"


class NewEndpoint(ValueError):
    """A model would send a key somewhere the station's config does not."""


def key_envs(model: ModelConfig) -> list[str]:
    """The environment variables whose value this model sends (none for offline providers)."""
    if not model.remote:
        return []
    if model.api_key_env:
        return [model.api_key_env]
    default = DEFAULT_KEY_ENV[model.provider]
    return [default, "GOOGLE_API_KEY"] if model.provider == "gemini" else [default]


def endpoints(model: ModelConfig) -> list[str]:
    """The custom endpoints a model talks to: its base_url and any URL named in its options."""
    found = [model.base_url] if model.base_url else []
    found += list(_urls_in(model.options))
    return [normal(url) for url in found]


# A string under a key that mentions one of these names a place requests may go: base_url, baseUrl,
# http_options.base_url, a proxy (which sees the key too), an endpoint.
ENDPOINT_WORDS = ("url", "proxy", "proxies", "endpoint")


def _urls_in(value: Any, under_url_key: bool = False) -> Iterator[str]:
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from _urls_in(inner, under_url_key or any(w in str(key).lower() for w in ENDPOINT_WORDS))
    elif isinstance(value, (list, tuple)):
        for inner in value:
            yield from _urls_in(inner, under_url_key)
    elif under_url_key and isinstance(value, str):
        yield value


def normal(url: str) -> str:
    """One spelling per endpoint: scheme and host in lower case, no trailing slash."""
    parts = urlsplit(url.strip())
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}{parts.path.rstrip('/')}" if parts.netloc else url.strip()


def routes(models: Iterable[ModelConfig]) -> set[tuple[str, str]]:
    """Every (key variable, custom endpoint) pair the models use, their backups' included."""
    return {
        (env, url) for m in models for each in endpoint_configs(m) for env in key_envs(each) for url in endpoints(each)
    }


def check(config: StationConfig, models: Iterable[ModelConfig], *, allow: bool = False) -> list[str]:
    """Refuse models that would send a key to an endpoint the config never sends it to, or read a
    replay file the config does not replay.

    With `allow` (the command line's --allow-new-endpoint) nothing is refused; the new pairs are
    returned as lines to show the operator what they allowed."""
    models = list(models)
    new = _new_files(config, models, allow)
    known = routes(config.all_models())
    known_urls = {url for _, url in known}
    for env, url in sorted(routes(models) - known):
        if allow:
            new.append(f"allowed by {ALLOW_FLAG}: this model sends {env} to {url}")
            continue
        where = "does not use" if url not in known_urls else f"does not send {env} to"
        raise NewEndpoint(
            f"refused: this model would send {env} to {url} which this station's config {where}; "
            f"give {ALLOW_FLAG} on the command line if you mean it"
        )
    return new


def _new_files(config: StationConfig, models: list[ModelConfig], allow: bool) -> list[str]:
    """Refuse (or, with `allow`, list) replay files the config does not already read: a replayed
    model shows each line of its file as a reply, so any file the station can read would be shown."""
    known = {m.replay_file for m in config.all_models() if m.replay_file}
    new = []
    for path in sorted({m.replay_file for m in models if m.replay_file} - known):
        if not allow:
            raise NewEndpoint(
                f"refused: this model would read {path}, a file this station's config does not "
                f"replay; give {ALLOW_FLAG} on the command line if you mean it"
            )
        new.append(f"allowed by {ALLOW_FLAG}: this model reads {path}")
    return new


def stored_config(store: Any) -> StationConfig:
    return parse_config(store.get_meta("config"), f"{store.dir}/station.db", stored=True)


def check_spawn(config: StationConfig, agent: dict[str, Any], *, allow: bool = False) -> list[str]:
    """`check` for an operator's spawn (an `agents:` entry, already validated)."""
    return check(config, [AgentSpec.model_validate({**agent, "count": 1}).model], allow=allow)


def check_set(config: StationConfig, key: str, value: Any, *, allow: bool = False) -> list[str]:
    """`check` for a `set`: every model of the config as it would be afterwards."""
    from station.core.commands import with_value  # commands is the heavier module; only `set` needs it

    return check(config, with_value(config, key, value).all_models(), allow=allow)
