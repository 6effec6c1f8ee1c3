"""The one OpenAI-compatible client, against real loopback services."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from http_server import ServiceHandler, fake_service, free_port
from memdir import __version__
from memdir.errors import ProviderError
from memdir.providers import openai
from memdir.providers.openai import OpenAIClient


class _Flaky(ServiceHandler):
    """Answers each request with the next status of ``statuses`` (then 200), and logs it."""

    statuses: list[int] = []
    seen: list[dict[str, Any]] = []
    delay = 0.0
    headers_out: dict[str, str] = {}

    def do_POST(self) -> None:
        body = self.read_json()
        kind = type(self)
        kind.seen.append(
            {
                "path": self.path,
                "body": body,
                "auth": self.headers.get("Authorization"),
                "agent": self.headers.get("User-Agent"),
            }
        )
        time.sleep(kind.delay)
        status = kind.statuses.pop(0) if kind.statuses else 200
        if status != 200:
            data = f"busy, try later (status {status})".encode()
            self.send_response(status)
            for name, value in kind.headers_out.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self.send_json({"data": [{"index": 0, "embedding": [1.0, 0.0]}]})


@pytest.fixture
def service() -> Iterator[tuple[str, type[_Flaky]]]:
    handler = type("F", (_Flaky,), {"statuses": [], "seen": [], "delay": 0.0, "headers_out": {}})
    with fake_service(handler) as url:
        yield f"{url}/v1", handler


def _client(url: str, **more: Any) -> OpenAIClient:
    options: dict[str, Any] = {"who": "test provider", "section": "llm", "timeout": 5.0}
    options.update(more)
    return OpenAIClient(url, **options)


def test_a_503_is_retried_then_the_answer_is_returned(service: tuple[str, type[_Flaky]]) -> None:
    url, handler = service
    handler.statuses = [503]
    with _client(url + "/") as client:
        answer = client.embeddings("toy", ["hello"])
    assert answer["data"][0]["embedding"] == [1.0, 0.0]
    assert [s["path"] for s in handler.seen] == ["/v1/embeddings", "/v1/embeddings"]
    assert handler.seen[1]["body"] == {"model": "toy", "input": ["hello"]}
    assert {s["agent"] for s in handler.seen} == {f"memdir/{__version__}"}


def test_retries_are_bounded_and_the_error_names_status_and_url(
    service: tuple[str, type[_Flaky]],
) -> None:
    url, handler = service
    handler.statuses = [503] * 10
    # Credentials in the URL are sent, never shown.
    with_user = url.replace("http://", "http://someone:pa55word@")
    with _client(with_user) as client, pytest.raises(ProviderError) as err:
        client.embeddings("toy", ["hello"])
    message = str(err.value)
    assert len(handler.seen) == openai.RETRIES + 1
    assert message.startswith("test provider: POST ")
    assert "answered HTTP 503: busy, try later (status 503)" in message
    assert url + "/embeddings" in message and "pa55word" not in message


def test_a_429_waits_as_long_as_retry_after_says(service: tuple[str, type[_Flaky]]) -> None:
    url, handler = service
    handler.statuses = [429]
    handler.headers_out = {"Retry-After": "0.6"}
    started = time.monotonic()
    with _client(url) as client:
        client.embeddings("toy", ["hello"])
    assert time.monotonic() - started >= 0.6
    assert len(handler.seen) == 2


def test_a_4xx_other_than_429_is_not_retried(service: tuple[str, type[_Flaky]]) -> None:
    url, handler = service
    handler.statuses = [400, 400, 400]
    with _client(url) as client, pytest.raises(ProviderError, match="answered HTTP 400"):
        client.embeddings("toy", ["hello"])
    assert len(handler.seen) == 1


def test_a_timeout_is_not_retried(service: tuple[str, type[_Flaky]]) -> None:
    url, handler = service
    handler.delay = 1.0
    client = _client(url, timeout=0.3)
    with client, pytest.raises(ProviderError, match=r"timed out: no answer within 0.3 s"):
        client.chat("m", [{"role": "user", "content": "hi"}])
    assert len(handler.seen) == 1


def test_a_refused_connection_is_retried_then_reported() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    started = time.monotonic()
    with _client(url) as client, pytest.raises(ProviderError) as err:
        client.rerank("m", "q", ["a"])
    assert "cannot be reached: ConnectError" in str(err.value)
    assert url + "/rerank" in str(err.value)
    # Waited between the attempts: 0.1 s, then 0.2 s.
    assert time.monotonic() - started >= 0.3


def test_a_url_httpx_cannot_use_is_reported_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from memdir.providers import openai as client_module

    waits: list[float] = []
    monkeypatch.setattr(client_module.time, "sleep", waits.append)
    with _client("127.0.0.1:9/v1") as client, pytest.raises(ProviderError) as err:
        client.embeddings("toy", ["a"])
    assert "cannot be reached: UnsupportedProtocol" in str(err.value)
    assert waits == []  # not retried (counted, not timed: a loaded machine is slow)


def test_the_key_comes_from_the_settings_or_their_environment_variable(
    service: tuple[str, type[_Flaky]], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, handler = service
    monkeypatch.setenv("MEMDIR_TEST_CLIENT_KEY", "from-the-environment")
    with _client(url, api_key_env="MEMDIR_TEST_CLIENT_KEY") as client:
        client.embeddings("toy", ["a"])
    # A key given with the provider's settings wins over the variable.
    with _client(url, api_key="given-key", api_key_env="MEMDIR_TEST_CLIENT_KEY") as client:
        client.embeddings("toy", ["a"])
    with _client(url) as client:
        client.embeddings("toy", ["a"])
    assert [s["auth"] for s in handler.seen] == [
        "Bearer from-the-environment",
        "Bearer given-key",
        None,
    ]


def test_a_refused_key_is_hidden_and_a_missing_one_explained(
    service: tuple[str, type[_Flaky]], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, handler = service
    handler.statuses = [401]
    with _client(url, api_key="sk-hidden-123") as client, pytest.raises(ProviderError) as err:
        client.post("embeddings", {"note": "sk-hidden-123"})
    assert "HTTP 401" in str(err.value) and "sk-hidden-123" not in str(err.value)
    monkeypatch.delenv("MEMDIR_TEST_UNSET_KEY", raising=False)
    handler.statuses = [401]
    unset = _client(url, api_key_env="MEMDIR_TEST_UNSET_KEY")
    with unset, pytest.raises(ProviderError, match=r"\$MEMDIR_TEST_UNSET_KEY is not set"):
        unset.embeddings("toy", ["a"])
    handler.statuses = [403]
    none = _client(url, section="rerank")
    with none, pytest.raises(ProviderError, match=r"name its variable in \[rerank\] api_key_env"):
        none.embeddings("toy", ["a"])


def test_a_chat_answer_without_content_is_a_provider_error(
    service: tuple[str, type[_Flaky]],
) -> None:
    url, _ = service  # answers an embeddings shape to every path
    with _client(url) as client, pytest.raises(ProviderError, match=r"without choices\[0\]"):
        client.chat("m", [{"role": "user", "content": "hi"}])
