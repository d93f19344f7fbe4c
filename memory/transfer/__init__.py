"""Moving memory in and out: importers (JSON Lines, ChatGPT, Claude), Recollect's own export and
import (export, portability) and import jobs that store first and embed in the background.
"""
