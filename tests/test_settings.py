"""Settings: flag > env > file > default, where each value came from, and bad files refused."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

import attrs
import pytest

from agentrt import open_runtime
from agentrt.config.keystore import KeyNameError
from agentrt.config.keystore import KeyStore
from agentrt.config.keystore import check_key_name
from agentrt.config.secrets import SecretStore
from agentrt.config.settings import HOSTED_URLS
from agentrt.config.settings import ConfigError
from agentrt.config.settings import Settings
from agentrt.config.settings import SourceKind
from agentrt.config.settings import bot_environ
from agentrt.config.settings import find_line
from agentrt.config.settings import load_settings
from agentrt.config.settings import model_options
from agentrt.models.anthropic import DEFAULT_ANTHROPIC_URL
from agentrt.models.anthropic import AnthropicModel
from agentrt.models.openai import DEFAULT_OPENAI_URL
from agentrt.models.providers import ConfiguredModel
from agentrt.models.providers import ModelOptions
from agentrt.vocab.questions import Timeout
from agentrt.vocab.questions import TimeoutAction
from agentrt.vocab.questions import Timeouts
from agentrt.vocab.terms import Approval
from agentrt.vocab.terms import RequestKind

from .conftest import write_config

CANARY = "sk-settings-canary-8c1d2e3f4a5b"


def flags(**given: Any) -> argparse.Namespace:
    return argparse.Namespace(**given)


@pytest.fixture
def home(tmp_path: Path) -> dict[str, str]:
    """An environment whose configuration and state live under `tmp_path`."""
    return {
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "AGENTRT_STATE_DIR": str(tmp_path / "state"),
    }


def load(env: dict[str, str], **given: Any) -> Settings:
    return load_settings(flags(**given), env)


# -- precedence and sources -----------------------------------------------------------


def test_with_nothing_configured_every_value_is_the_default(home: dict[str, str]) -> None:
    settings = load(home)
    assert settings.model.value == "scripted"
    assert settings.approval.value is Approval.ASK
    assert not settings.config_found
    assert settings.config.value == Path(home["XDG_CONFIG_HOME"]) / "agentrt" / "config.toml"
    assert settings.providers["openai"].base_url.value == "https://api.openai.com/v1"
    assert settings.restricted_paths.value == (Path("/etc"), Path("/usr"), Path("/boot"))
    assert settings.http.value is None
    for key, value in settings.items():
        if key not in ("state_dir",):
            assert value.source.kind is SourceKind.DEFAULT, key


def test_a_flag_beats_the_environment_which_beats_the_file(home: dict[str, str]) -> None:
    path = write_config(home, '# mine\n\nmodel = "openai:from-file"\napproval = "auto-edit"\n')
    from_file = load(home)
    assert from_file.model.value == "openai:from-file"
    assert str(from_file.model.source) == f"file {path}:3"
    assert str(from_file.approval.source) == f"file {path}:4"
    assert from_file.approval.value is Approval.AUTO_EDIT

    env = {**home, "AGENTRT_MODEL": "openai:from-env", "AGENTRT_APPROVAL": "full-auto"}
    from_env = load(env)
    assert from_env.model.value == "openai:from-env"
    assert str(from_env.model.source) == "env AGENTRT_MODEL"
    assert from_env.approval.value is Approval.FULL_AUTO

    from_flag = load(env, model="anthropic:from-flag", approval="ask")
    assert from_flag.model.value == "anthropic:from-flag"
    assert str(from_flag.model.source) == "flag --model"
    assert from_flag.approval.value is Approval.ASK
    assert str(from_flag.approval.source) == "flag --approval"


def test_the_file_is_found_by_flag_env_or_xdg(home: dict[str, str], tmp_path: Path) -> None:
    other = tmp_path / "other.toml"
    other.write_text('model = "openai:other"\n')
    by_env = load({**home, "AGENTRT_CONFIG": str(other)})
    assert by_env.model.value == "openai:other"
    assert str(by_env.config.source) == "env AGENTRT_CONFIG"
    by_flag = load(home, config=other)
    assert (by_flag.config.value, str(by_flag.config.source)) == (other, "flag --config")
    with pytest.raises(
        ConfigError, match=r"configuration file .*missing\.toml \(flag --config\) does not exist"
    ):
        load(home, config=tmp_path / "missing.toml")


def test_sdk_variables_set_base_url_headers_and_keys_of_their_own_provider(
    home: dict[str, str],
) -> None:
    env = {
        **home,
        "OPENAI_BASE_URL": "http://localhost:11434/v1",
        "OPENAI_ORG_ID": "org-1",
        "OPENAI_PROJECT_ID": "proj-1",
        "ANTHROPIC_BASE_URL": "http://127.0.0.1:9/anthropic",
        "ANTHROPIC_CUSTOM_HEADERS": "X-Gateway: east\nnot a header line",
        "ANTHROPIC_API_KEY": f"  {CANARY}\n",
    }
    settings = load(env, model="openai:llama3.2")
    openai = settings.providers["openai"]
    assert (openai.base_url.value, str(openai.base_url.source)) == (
        "http://localhost:11434/v1",
        "env OPENAI_BASE_URL",
    )
    assert {k: v.value for k, v in openai.headers.items()} == {
        "OpenAI-Organization": "org-1",
        "OpenAI-Project": "proj-1",
    }
    anthropic = settings.providers["anthropic"]
    assert anthropic.base_url.value == "http://127.0.0.1:9/anthropic"
    assert {k: v.value for k, v in anthropic.headers.items()} == {"X-Gateway": "east"}
    assert anthropic.api_key.value == CANARY
    assert str(anthropic.api_key.source) == "env ANTHROPIC_API_KEY"
    assert not openai.hosted


def test_the_key_comes_from_the_environment_then_the_key_store_then_the_old_secret(
    home: dict[str, str],
) -> None:
    state = Path(home["AGENTRT_STATE_DIR"])
    SecretStore(state / "secrets").put("openai_api_key", "legacy-key-1234")
    settings = load(home, model="openai:gpt-4o")
    assert settings.providers["openai"].api_key.value == "legacy-key-1234"
    assert str(settings.providers["openai"].api_key.source) == "secret store openai_api_key"

    KeyStore.for_state_dir(state).put("OPENAI_API_KEY", CANARY)
    stored = load({**home, "OPENAI_API_KEY": "   "}, model="openai:gpt-4o")  # blank is unset
    assert stored.providers["openai"].api_key.value == CANARY
    assert str(stored.providers["openai"].api_key.source) == "key store OPENAI_API_KEY"

    from_env = load({**home, "OPENAI_API_KEY": "env-key-5678"}, model="openai:gpt-4o")
    assert from_env.providers["openai"].api_key.value == "env-key-5678"

    KeyStore.for_state_dir(state).put("OPENROUTER_API_KEY", "router-key-0000")
    routed = load(home, model="openai:x", api_key_env="OPENROUTER_API_KEY")
    assert routed.providers["openai"].api_key.value == "router-key-0000"
    assert str(routed.providers["openai"].api_key_env.source) == "flag --api-key-env"


def test_keys_and_credential_headers_are_never_shown(home: dict[str, str]) -> None:
    write_config(
        home,
        '[openai.headers]\n"api-key" = "header-secret-9f8e"\n"X-Title" = "agentrt"\n',
    )
    settings = load({**home, "OPENAI_API_KEY": CANARY})
    shown = json.dumps(settings.rows()) + json.dumps(settings.as_json())
    assert CANARY not in shown
    assert "header-secret-9f8e" not in shown
    assert "agentrt" in shown  # a harmless header's value is shown
    rows = {key: (value, source) for key, value, source in settings.rows()}
    assert rows["openai.api_key"] == (f"(set, {len(CANARY)} characters)", "env OPENAI_API_KEY")
    assert rows["openai.headers.api-key"][0] == "(set, 18 characters)"
    data = settings.as_json()
    assert data["openai.api_key"] == {
        "value": None,
        "source": "env",
        "where": "OPENAI_API_KEY",
        "set": True,
    }
    assert data["anthropic.api_key"]["set"] is False


def test_a_whole_file_is_read_with_each_line(home: dict[str, str]) -> None:
    path = write_config(
        home,
        """\
model = "anthropic:claude-sonnet-4-5"
approval = "full-auto"
max_tokens = 2048
temperature = 0.5
restricted_paths = ["/srv", "~/secrets"]

[anthropic]
base_url = "https://gateway.example/anthropic"
api_key_env = "GATEWAY_KEY"
headers = { "X-Team" = "core" }

[http]
listen = "127.0.0.1:8765"

[telegram]
enabled = true
allow = [12345, "67890"]
token_env = "MY_TG_TOKEN"
""",
    )
    KeyStore.for_state_dir(Path(home["AGENTRT_STATE_DIR"])).put("MY_TG_TOKEN", "tg-token-123")
    settings = load(home)
    assert settings.max_tokens.value == 2048
    assert settings.temperature.value == 0.5
    assert settings.restricted_paths.value == (Path("/srv"), Path("~/secrets").expanduser())
    provider = settings.provider
    assert provider is not None and provider.name == "anthropic"
    assert str(provider.base_url.source) == f"file {path}:8"
    assert str(provider.api_key_env.source) == f"file {path}:9"
    assert str(provider.headers["X-Team"].source) == f"file {path}:10"
    assert settings.http.value == ("127.0.0.1", 8765)
    telegram = settings.bots["telegram"]
    assert telegram.enabled.value is True
    assert telegram.allow.value == ("12345", "67890")
    assert str(telegram.token.source) == "key store MY_TG_TOKEN"
    env = bot_environ(settings, {"AGENTRT_TELEGRAM_ALLOW": ""})
    assert env["AGENTRT_TELEGRAM_TOKEN"] == "tg-token-123"
    assert env["AGENTRT_TELEGRAM_ALLOW"] == "12345 67890"
    assert "AGENTRT_DISCORD_TOKEN" not in env
    options = model_options(settings)
    assert options == ModelOptions(
        base_url="https://gateway.example/anthropic",
        api_key_env="GATEWAY_KEY",
        headers={"X-Team": "core"},
        max_tokens=2048,
        temperature=0.5,
    )


# -- bad files and bad values ---------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ('model = "scripted"\nmodel = [\n', 2, r"not valid TOML: "),
        ('model = "scripted"\nmodle = "x"\n', 2, r"modle: unknown key; did you mean 'model'\?"),
        (
            '\n[openai]\nbase_ur = "http://x"\n',
            3,
            r"openai\.base_ur: unknown key; did you mean 'base_url'\?.*\[openai\] table",
        ),
        ("max_tokens = 'lots'\n", 1, r"max_tokens: must be a positive integer, not 'lots'"),
        ("temperature = true\n", 1, r"temperature: must be a number from 0 to 2, not true"),
        (
            'approval = "yolo"\n',
            1,
            r"approval: unknown approval policy 'yolo'; expected one of: ask, auto-edit, full-auto",
        ),
        ('model = "mistral:large"\n', 1, r"model: unknown model 'mistral:large'"),
        (
            '[anthropic]\nbase_url = "api.anthropic.com"\n',
            2,
            r"anthropic\.base_url: 'api\.anthropic\.com' is not an http:// or https:// URL",
        ),
        ('[http]\nlisten = "8765"\n', 2, r"http\.listen: expected HOST:PORT"),
        ('openai = "yes"\n', 1, r"openai: must be a table \(\[openai\]\), not 'yes'"),
        ("[telegram]\nallow = [1.5]\n", 2, r"telegram\.allow: must be a list of user ids"),
        (
            'openai.headers = { "bad header" = "x" }\n',
            1,
            r"'bad header' is not a valid HTTP header name",
        ),
        (
            '[discord]\ntoken_env = "my token"\n',
            2,
            r"discord\.token_env: invalid key name 'my token'",
        ),
        (
            "[timeouts]\nconfirm = 30\n",
            2,
            r'^[^ ]+ timeouts\.confirm: must be a duration such as "90s", "30m", "2h" or "1d", '
            r"not 30$",
        ),
        (
            '[timeouts]\nquestion = "half an hour"\nquestion_action = "deny"\n',
            2,
            r"timeouts\.question: 'half an hour' is not a duration; write one such as \"90s\"",
        ),
        (
            '[timeouts]\nsecret = "0m"\nsecret_action = "deny"\n',
            2,
            r"timeouts\.secret: '0m' is no time at all; a timeout must be longer than 0s$",
        ),
        (
            '[timeouts]\npassword_action = "later"\n',
            2,
            r"timeouts\.password_action: unknown action 'later'; expected one of: 'pause', "
            r"'deny', 'wait'$",
        ),
        (
            '[timeouts]\nconfirm_after = "30m"\n',
            2,
            r"timeouts\.confirm_after: unknown key; did you mean 'confirm_action'\?",
        ),
        (
            '[timeouts]\n\nconfirm = "30m"\n',
            3,
            r"timeouts\.confirm: a timeout needs an action: set timeouts\.confirm_action to "
            r'"pause" or "deny" \(unset, it waits\), or leave timeouts\.confirm out to wait for '
            r"ever$",
        ),
        (
            '[timeouts]\nquestion = "2h"\nquestion_action = "wait"\n',
            2,
            r'timeouts\.question: a timeout needs an action: .*\(its "wait" never times out\)',
        ),
        (
            '[timeouts]\nconfirm = "1d"\nconfirm_action = "deny"\nquestion_action = "pause"\n',
            4,
            r"timeouts\.question_action: 'pause' needs timeouts\.question, how long a question "
            r'waits first \(such as "30m"\)$',
        ),
    ],
)
def test_a_bad_file_is_refused_naming_file_line_and_key(
    home: dict[str, str], text: str, line: int, message: str
) -> None:
    path = write_config(home, text)
    with pytest.raises(ConfigError) as caught:
        load(home)
    error = str(caught.value)
    assert error.startswith(f"{path}:{line}: "), error
    assert re.search(message, error), error


async def test_timeouts_are_read_per_kind_shown_with_their_lines_and_reach_the_runs(
    home: dict[str, str], tmp_path: Path
) -> None:
    path = write_config(
        home,
        "[timeouts]\n"
        'confirm = "30m"          # how long a confirmation waits\n'
        'confirm_action = "pause"\n'
        'question = "1h30m"\n'
        'question_action = "deny"\n',
    )
    settings = load(home)
    assert settings.timeouts == Timeouts(
        confirm=Timeout(1800.0, TimeoutAction.PAUSE),
        question=Timeout(5400.0, TimeoutAction.DENY),
    )
    assert settings.timeouts.of(RequestKind.SECRET) == Timeout(None, TimeoutAction.WAIT)
    rows = {key: (value, source) for key, value, source in settings.rows()}
    assert rows["timeouts.confirm"] == ("30m", f"file {path}:2")
    assert rows["timeouts.confirm_action"] == ("pause", f"file {path}:3")
    assert rows["timeouts.question"] == ("1h30m", f"file {path}:4")
    assert rows["timeouts.password"] == ("(not set)", "default")
    assert rows["timeouts.password_action"] == ("wait", "default")
    assert settings.as_json()["timeouts.question_action"]["value"] == "deny"
    async with open_runtime(tmp_path / "state", settings=settings, workdir=tmp_path) as runtime:
        assert runtime.executor.config.timeouts == settings.timeouts


def test_bad_values_from_flags_and_the_environment_name_their_source(
    home: dict[str, str],
) -> None:
    with pytest.raises(ConfigError, match=r"^flag --model: unknown model 'gpt'"):
        load(home, model="gpt")
    # AGENTRT_MODEL is checked by whoever runs the model: a command going through a
    # daemon runs the daemon's.
    from_env = load({**home, "AGENTRT_MODEL": "gpt"})
    with pytest.raises(ConfigError, match=r"^env AGENTRT_MODEL: unknown model 'gpt'"):
        from_env.check_model()
    assert load({**home, "AGENTRT_MODEL": "openai:m"}).check_model() == "openai:m"
    with pytest.raises(ConfigError, match=r"^env AGENTRT_APPROVAL: unknown approval policy"):
        load({**home, "AGENTRT_APPROVAL": "sometimes"})
    with pytest.raises(ConfigError, match=r"^env OPENAI_BASE_URL: 'localhost:11434' is not"):
        load({**home, "OPENAI_BASE_URL": "localhost:11434"}, model="openai:llama3.2")
    with pytest.raises(ConfigError, match=r"^flag --base-url: 'ftp://x' is not an http"):
        load(home, model="anthropic:m", base_url="ftp://x")
    with pytest.raises(ConfigError, match=r"--base-url is for an openai: or anthropic: model"):
        load(home, base_url="http://localhost:11434/v1")
    # Another provider's variable does not stop a command that does not use it.
    fine = load({**home, "OPENAI_BASE_URL": "localhost:11434"}, model="anthropic:m")
    assert fine.model.value == "anthropic:m"


def test_find_line_knows_tables_dotted_keys_quotes_and_inline_tables() -> None:
    text = """\
model = "x"   # a comment
[openai]
"base_url" = "http://a"
headers = { "X-A" = "1",
  "X-B" = "2" }

[openai.more]
key = 1
telegram.allow = [1]
"""
    assert find_line(text, ("model",)) == 1
    assert find_line(text, ("openai",)) == 2
    assert find_line(text, ("openai", "base_url")) == 3
    assert find_line(text, ("openai", "headers")) == 4
    assert find_line(text, ("openai", "headers", "X-B")) == 4  # inside the inline table
    assert find_line(text, ("openai", "more", "key")) == 8
    assert find_line(text, ("openai", "more", "telegram", "allow")) == 9
    assert find_line(text, ("anthropic", "base_url")) is None


# -- keys and the providers' seam --------------------------------------------------


def test_key_names_are_variable_names() -> None:
    assert check_key_name("OPENAI_API_KEY") == "OPENAI_API_KEY"
    with pytest.raises(KeyNameError, match=r"use OPENAI_API_KEY, not 'openai'"):
        check_key_name("openai")
    for bad in ("", "1KEY", "A-B", "../x", "a b", "x" * 129):
        with pytest.raises(KeyNameError, match="invalid key name"):
            check_key_name(bad)


def test_the_key_store_writes_0600_files_and_lists_names_only(tmp_path: Path) -> None:
    keys = KeyStore.for_state_dir(tmp_path / "state")
    assert keys.names() == [] and not keys.path.exists()  # reading creates nothing
    keys.put("B_KEY", "value-b\n")
    keys.put("A_KEY", "value-a")
    assert keys.names() == ["A_KEY", "B_KEY"]
    assert (keys.path / "A_KEY").stat().st_mode & 0o777 == 0o600
    assert keys.path.stat().st_mode & 0o777 == 0o700
    assert keys.get("B_KEY") == "value-b"
    assert "value" not in repr(keys)
    assert keys.delete("A_KEY") and not keys.delete("A_KEY")
    assert keys.names() == ["B_KEY"]


def test_hosted_urls_are_the_providers_defaults() -> None:
    assert HOSTED_URLS == {"openai": DEFAULT_OPENAI_URL, "anthropic": DEFAULT_ANTHROPIC_URL}


def test_options_reach_the_provider_that_takes_them_and_the_rest_are_reported(
    caplog: pytest.LogCaptureFixture,
) -> None:
    options = ModelOptions(headers={"X-Title": "t"}, max_tokens=123, temperature=0.3)
    for provider in ("openai", "anthropic"):
        caplog.clear()
        built = ConfiguredModel(provider, "m", options, lambda: "k").current()
        taken = attrs.fields_dict(type(built))
        reported = " ".join(r.getMessage() for r in caplog.records)
        for option, value in options.given().items():
            said = f"{option} is set, but the {provider} provider takes no {option}"
            if option in taken:
                assert getattr(built, option) == value
                assert said not in reported
            else:
                assert said in reported
    # Today's classes: Anthropic's takes max_tokens, so it is sent.
    anthropic = ConfiguredModel("anthropic", "m", options).current()
    assert isinstance(anthropic, AnthropicModel)
    assert anthropic.max_tokens == 123


def test_a_stored_key_is_hidden_like_a_secret(tmp_path: Path) -> None:
    from agentrt.agent.guard import Redactor

    state = tmp_path / "state"
    redactor = Redactor.for_state_dir(state)
    assert redactor.redact(f"echo {CANARY}") == f"echo {CANARY}"
    KeyStore.for_state_dir(state).put("OPENAI_API_KEY", CANARY)
    assert redactor.redact(f"echo {CANARY}") == "echo [secret OPENAI_API_KEY]"


def test_a_secret_value_stays_out_of_repr(home: dict[str, str]) -> None:
    settings = load({**home, "OPENAI_API_KEY": CANARY, "AGENTRT_TELEGRAM_TOKEN": CANARY})
    assert CANARY not in repr(settings)
    assert "'scripted'" in repr(settings.model)


# -- the store and the fleet ------------------------------------------------------------


def test_the_store_comes_from_flag_env_or_file_and_its_password_is_never_shown(
    home: dict[str, str],
) -> None:
    assert load(home).store.value is None  # tasks.db in the state dir
    path = write_config(home, 'store = "postgresql://ada:s3cret@db/agents"\n[fleet]\nlease = 4\n')
    from_file = load(home)
    assert from_file.store.value == "postgresql://ada:s3cret@db/agents"
    assert str(from_file.store.source) == f"file {path}:1"
    assert (from_file.lease.value, str(from_file.lease.source)) == (4, f"file {path}:3")
    env = {**home, "AGENTRT_STORE": "postgresql://db/env", "AGENTRT_FLEET_LEASE": "2.5"}
    from_env = load(env)
    assert (from_env.store.value, str(from_env.store.source)) == (
        "postgresql://db/env",
        "env AGENTRT_STORE",
    )
    assert from_env.lease.value == 2.5
    from_flag = load(env, store="postgresql://db/flag?password=s3cret")
    assert str(from_flag.store.source) == "flag --store"
    shown = dict((key, value) for key, value, _ in from_file.rows())
    assert shown["store"] == "postgresql://ada:***@db/agents"
    assert "s3cret" not in json.dumps(from_flag.as_json())
    assert "s3cret" not in json.dumps(from_file.as_json())


def test_a_bad_store_or_lease_is_refused_naming_its_source(home: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match=r"^flag --store: unknown store 'mysql://db'"):
        load(home, store="mysql://db")
    with pytest.raises(ConfigError, match=r"^env AGENTRT_FLEET_LEASE: must be a number of sec"):
        load({**home, "AGENTRT_FLEET_LEASE": "0"})
    with pytest.raises(ConfigError, match=r"^env AGENTRT_FLEET_LEASE: must be a number of sec"):
        load({**home, "AGENTRT_FLEET_LEASE": "soon"})
    path = write_config(home, "[fleet]\nlease = true\n")
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))}:2: fleet.lease: must be"):
        load(home)
