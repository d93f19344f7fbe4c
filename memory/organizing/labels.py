"""Topic labels and keywords as a person would write them, without a model.

A label is a 2-5 word phrase taken from the topic's own messages, in their language: candidate
phrases are runs of words that neither start nor end with a stop word of the message's language
(English, Spanish, French, Portuguese, German and Italian lists below; the language of each
message is the one whose stop words it uses most), scored YAKE-style by statistics (how often
the phrase and its words occur in this topic, how rarely in the owner's other topics) and then
by how close the phrase's embedding lies to the topic's centroid. Siblings never share a label:
each takes its best phrase that no sibling took.

Ids (Recollect's ULIDs, hashes, number-letter codes) and the words of Recollect's own texts
never name a topic, whatever memory holds.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

# Words of Recollect's own texts (offline-recall answers, tool results, the index): a label
# holding one names the machinery, not what a person talked about.
SYSTEM_WORDS = frozenset({
    "offline", "configured", "recall", "snippet", "snippets", "query", "queries", "ulid", "ulids",
    "assistant", "search_and_retrieve", "vector_search", "message_id", "tool_call",
})

_HEX = re.compile(r"[0-9a-f]{7,}", re.IGNORECASE)
_HAS_DIGIT = re.compile(r"\d")
_HAS_LETTER = re.compile(r"[^\W\d_]")
# Ordinals, decades and plain years are words a person writes ("21st", "1990s", "2023").
_WORDLIKE_NUMBER = re.compile(r"\d+(?:st|nd|rd|th|s)|\d{4}", re.IGNORECASE)


def is_id_like(word: str) -> bool:
    """An id or code rather than a word: a ULID or other long token of letters and digits, a
    hex hash, or a number-letter code ("m88dk6dhp09", "a1b2", "x7"), but not "21st" or "1990s"."""
    w = word.strip("'’-_.")
    if not w:
        return False
    if _WORDLIKE_NUMBER.fullmatch(w):
        return False
    if _HAS_DIGIT.search(w) and _HAS_LETTER.search(w):
        return True
    if len(w) >= 7 and _HEX.fullmatch(w) and _HAS_DIGIT.search(w):
        return True
    return "_" in w.strip("_") and len(w) > 12  # a machine name (message_id_of_some_thing)


# --- stop words ----------------------------------------------------------------------------------
# Besides grammar words, the words of chat that name nothing: greetings, fillers, the commonest
# verbs and adjectives of small talk, and words of time ("yesterday", "last week").
_ENGLISH = """
a about above across actually after again against ago all almost already also although always am
amazing an and another any anybody anyone anything anyway anyways are aren't around as ask asked
at away awesome aw aww back bad be became because become been before being believe below best
better between big bit both but by bye can can't cannot care cause certainly com come comes coming
cool could couldn't cute day days definitely did didn't do does doesn't doing don't done down
during each easy else enjoy enjoyed enough especially even ever every everyone everything exactly
excited fantastic far feel feeling feels felt few fine for found from fun further gave get gets
getting give glad go goes going gone good got gotta great guess guys had hadn't haha happy hard
has hasn't have haven't having he he'd he'll he's hear heard hello help her here here's hers
herself hey hi him himself his hmm hope hopefully how how's however huge i i'd i'll i'm i've
idea if important in incredible indeed instead interesting into is isn't it it's its itself just
keep kind kinda know known last lately later least less let let's like liked little lol long look
looked looking looks lot lots love loved lovely made make makes making many may maybe me mean
meant might mind mine more morning most much must my myself need needed needs never new next nice
night no nope nor not nothing now of off oh ok okay old on once one ones only or other others
otherwise ought our ours ourselves out over own pretty probably put quite rather really right said
same saw say saying says see seeing seem seemed seems seen she she'd she'll she's should shouldn't
since so some somebody someone something sometime sometimes somewhat soon sorry sounds special
still stuff such super sure take taken taking talk talked tell thank thanks that that's the their
theirs them themselves then there there's these they they'd they'll they're they've thing things
think thinking this those though thought through thx time times to today together told tomorrow
tonight too took totally tough tried true truly try trying two under until up upon us use used
using very via wait want wanted wants was wasn't way ways we we'd we'll we're we've week weekend
weeks well went were weren't what what's whatever when where where's whether which while who who's
whole whom whose why will with within without won't wonderful wow would wouldn't yay yeah year
years yep yes yesterday yet you you'd you'll you're you've your yours yourself yourselves
plus bout ’bout em ya ur u absolutely anymore awhile btw congrats congratulations cheers dear
gonna hey hooray wanna woohoo
yup let's i’m it’s don’t that’s you’re can’t i’ve we’re what’s there’s didn’t
"""
_SPANISH = """
a al algo algún alguna algunas alguno algunos allí ante antes aquel aquella aquí así aún bien
bueno buena cada casi como con contra cual cuales cuando cuánto de del desde donde dos durante e
el él ella ellas ellos en entre era eran es esa esas ese eso esos esta está están estaba estar
este esto estos estoy fue fueron gracias ha había hace hacer hasta hay he hola hoy la las le les
lo los más me mi mis mismo mucho muy nada ni no nos nosotros nuestra nuestro o os otra otro para
pero poco por porque pues que qué quien se sea ser si sí sido siempre sin sobre solo son soy su
sus también tan tanto te tengo tenemos tiene tienen todo todos tu tú tus un una unas uno unos usted
va vamos y ya yo hola ayer mañana semana año años día días vez veces llama llamo cómo dónde cuándo
ahora entonces además después puede puedo quiero quiere creo estás eres fui muchas muchos mío tuyo
"""
_FRENCH = """
à au aux avec ce ces cette dans de des du elle elles en est et été être eu il ils je la le les
leur leurs lui ma mais me même mes moi mon ne nos notre nous on ou où par pas pour qu que qui sa
se ses son sont sur ta te tes toi ton tu un une vos votre vous y c'est j'ai très bien aussi alors
"""
_PORTUGUESE = """
a ao aos as até com como da das de do dos e ela elas ele eles em entre era essa esse esta está
estou eu foi há isso isto já lhe mais mas me meu minha muito na nas não nem no nos nós o os ou
para pela pelo por que quando se sem ser seu sua são também te tem tenho um uma você vocês obrigado
"""
_GERMAN = """
aber als am an auch auf aus bei bin bis da das dass dem den der des die dir doch du ein eine einem
einen einer es für hat habe haben ich ihr im in ist ja kein mich mir mit nach nicht noch nur oder
schon sehr sich sie sind so über um und uns von vor war was wie wir wird zu zum zur danke
"""
_ITALIAN = """
a ad al alla alle anche che chi ci con cosa da dal dalla dei del della delle di e è gli ha ho i il
in io la le lei lo loro lui ma mi mia mio molto ne nel nella noi non per più quando quello questo
se si sono su sua suo tu tutto un una uno voi sei sto grazie ciao
"""


def _word_set(text: str) -> frozenset[str]:
    return frozenset(text.split())


# The only stop words a label may hold inside it ("Trip to the beach", "Bank of America",
# "Clases de baile"): those that join nouns. Others inside a phrase make it a piece of a
# sentence ("Music do you play", "Heart that our kids").
CONNECTORS = _word_set("""
of and for with in on at to from the a an & de del la el los las y e en con para por al des du
et le les da do das dos der die und von im di il della delle
""")
# English words before a verb and before a noun: a phrase whose first word follows the former
# more often than the latter in the topic's text starts with a verb ("Find solutions").
_VERB_CUES = _word_set("""
i you we they he she to will would can could should might must don't didn't can't won't gonna
wanna let's i'll we'll you'll i'd we'd i'm just really also always never often usually it who
is are was were be been am isn't wasn't aren't
""")
_NOUN_CUES = _word_set("""
the a an my your his her our their its this that these those some any of for in on with new big
little great first last favorite favourite best old
""")
# Words ending in -ly that are not adverbs.
_NOT_ADVERBS = _word_set("""
family july italy daily early only lovely holy fly ugly jelly belly bully rally ally supply
reply assembly butterfly lily friendly monthly weekly yearly silly curly elderly lonely
""")

# English words that end no name, besides the stop words: ordinals and quantifiers that wait for
# their noun ("Tips for the first").
_DANGLING = _word_set("""
first second third fourth fifth last next other such own same several various certain whole
either neither every each most least more less much many few else anyway though
""")
# The commonest verbs in the past and present tense: one ends a clause, not a name ("Orange
# engine warning light came"), and one starts a clause ("Depends and instinct").
_FINITE_VERBS = _word_set("""
came went got took made said saw gave found left felt kept told thought brought bought began
ran wrote knew become became seemed happened started finished decided worked helped turned
comes goes gets takes makes says sees gives finds leaves feels keeps tells thinks brings buys
depends means needs wants works helps seems happens starts calls turns runs
deserves matters belongs remains looks sounds goes
""")
# Words in -ing and -ed that are nouns or adjectives of a name ("Wedding plans", "Spring
# cleaning", "Red bed sheets"), not a verb that waits for its object.
_NOT_VERBS = _word_set("""
wedding building meeting morning evening painting clothing ceiling thing king ring spring string
something nothing everything anything during feeling being sibling darling pudding stuffing
icing dressing filling frosting seasoning camping hiking fishing parking shopping housing
funding hearing reading writing training learning teaching banking marketing engineering
parenting gardening cooking baking swimming running cycling knitting sewing drawing
bed red seed feed need speed shed weed bleed breed hundred kindred
""")

STOP_WORDS: dict[str, frozenset[str]] = {
    lang: frozenset(text.split())
    for lang, text in (
        ("en", _ENGLISH),
        ("es", _SPANISH),
        ("fr", _FRENCH),
        ("pt", _PORTUGUESE),
        ("de", _GERMAN),
        ("it", _ITALIAN),
    )
}
# Words that tell a language apart (those its list shares with no other list).
_MARKERS = {
    lang: words - frozenset().union(*(w for other, w in STOP_WORDS.items() if other != lang))
    for lang, words in STOP_WORDS.items()
}
# What no label holds in any language: chat roles, and Recollect's own words.
_NEVER = frozenset({"user", "assistant", "message", "messages", *SYSTEM_WORDS})

TOKEN = re.compile(r"[^\W_](?:[\w'’\-]*[^\W_])?")
# Where a phrase cannot run on: sentence and clause punctuation, brackets, quotes, line ends.
_BREAK = re.compile(r"[.,;:!?¡¿()\[\]{}\"“”«»…—–|/\\*#<>=+\n]+|\s-\s")
_DIGITS = re.compile(r"\d+(?:[.,]\d+)*")


def language_of(words: Sequence[str]) -> str:
    """The language whose distinctive stop words `words` (lowercased) use most; English when
    none is used."""
    counts = {lang: sum(1 for w in words if w in markers) for lang, markers in _MARKERS.items()}
    best = max(counts, key=lambda lang: (counts[lang], lang == "en"))
    return best if counts[best] else "en"


def _plain(word: str) -> str:
    return word.lower().replace("’", "'")


def word_key(word: str) -> str:
    """How a word is counted: lowercased, "Melanie's" as "melanie"."""
    w = _plain(word)
    return w[:-2] if w.endswith("'s") and len(w) > 3 else w


def content_word(word: str, stop: frozenset[str]) -> bool:
    """A word that can start or end a phrase and be a keyword: not a stop word, a number, an id
    or a word of Recollect's own ("Melanie's" counts as "Melanie")."""
    w = word_key(word)
    return (
        len(w) > 1
        and w not in stop
        and w not in _NEVER
        and not _DIGITS.fullmatch(w)
        and not is_id_like(w)
        and bool(_HAS_LETTER.search(w))
    )


@dataclass
class Phrases:
    """The candidate phrases and content words of a set of texts."""

    language: str = "en"
    phrases: Counter = field(default_factory=Counter)  # lowercased phrase -> texts holding it
    words: Counter = field(default_factory=Counter)  # lowercased content word -> texts holding it
    surface: dict[str, Counter] = field(default_factory=dict)  # phrase -> how it was written
    first_seen: dict[str, int] = field(default_factory=dict)  # phrase -> index of first text
    verbish: Counter = field(default_factory=Counter)  # word -> times after a verb's cue
    nounish: Counter = field(default_factory=Counter)  # word -> times after a noun's cue

    def keywords(self, doc_freq: Counter, n_docs: int, k: int = 8) -> list[str]:
        return [w for w, _ in ranked_words(self.words, doc_freq, n_docs)[:k]]


def ranked_words(words: Counter, doc_freq: Counter, n_docs: int) -> list[tuple[str, float]]:
    """Content words by tf-idf against the owner's other topics: a word in nearly every topic
    (a name, a habit of speech) sets none apart and counts for little."""
    scored = {w: c * math.log((n_docs + 1) / (doc_freq.get(w, 0) + 0.5)) for w, c in words.items()}
    return sorted(scored.items(), key=lambda kv: (-kv[1], kv[0]))


def phrases_of(texts: Iterable[str], *, max_words: int = 5, chars: int = 3000) -> Phrases:
    """Candidate phrases (1 to max_words words) of `texts`, each text in its own language; only
    the texts in the language most of them use give phrases (a topic is named in its language)."""
    split: list[tuple[str, list[list[str]]]] = []
    languages: Counter = Counter()
    for text in texts:
        pieces = [TOKEN.findall(piece) for piece in _BREAK.split(text[:chars])]
        lang = language_of([_plain(w) for piece in pieces for w in piece])
        split.append((lang, pieces))
        languages[lang] += 1
    out = Phrases(language=languages.most_common(1)[0][0] if languages else "en")
    stop = STOP_WORDS[out.language]
    for index, (lang, pieces) in enumerate(split):
        if lang != out.language:
            continue
        seen_phrases: set[str] = set()
        seen_words: set[str] = set()
        for tokens in pieces:
            ok = [content_word(t, stop) and not _adverb(t, out.language) for t in tokens]
            inside = [ok[i] or _plain(t) in CONNECTORS for i, t in enumerate(tokens)]
            for i, token in enumerate(tokens):
                if content_word(token, stop):
                    seen_words.add(word_key(token))
                    before = _plain(tokens[i - 1]) if i else ""
                    # "I", "to", "is" ... and an adverb ("slowly formed", "definitely start")
                    # come before a verb.
                    if before in _VERB_CUES or _adverb(before, out.language):
                        out.verbish[word_key(token)] += 1
                    elif before in _NOUN_CUES:
                        out.nounish[word_key(token)] += 1
                if not ok[i]:
                    continue
                for n in range(1, max_words + 1):
                    j = i + n - 1
                    if j >= len(tokens) or not inside[j]:
                        break
                    if not ok[j]:
                        continue
                    window = tokens[i : j + 1]
                    if any(is_id_like(t) or _plain(t) in _NEVER for t in window):
                        break
                    key = " ".join(_plain(t) for t in window)
                    seen_phrases.add(key)
                    out.surface.setdefault(key, Counter())[" ".join(window)] += 1
                    out.first_seen.setdefault(key, index)
        out.phrases.update(seen_phrases)
        out.words.update(seen_words)
    return out


def _adverb(word: str, language: str) -> bool:
    """An English adverb in -ly ("nicely", "obviously"): it neither starts nor ends a name."""
    return (
        language == "en"
        and word.islower()
        and word.endswith("ly")
        and len(word) > 4
        and word not in _NOT_ADVERBS
    )


def merge(parts: Sequence[Phrases]) -> Phrases:
    """The phrases of several topics as one (a parent's, from its children's), in the language
    most of them use."""
    weight: Counter = Counter()
    for p in parts:
        weight[p.language] += sum(p.words.values())
    out = Phrases(language=weight.most_common(1)[0][0] if weight else "en")
    for index, p in enumerate(parts):
        if p.language != out.language:
            continue
        out.phrases.update(p.phrases)
        out.words.update(p.words)
        out.verbish.update(p.verbish)
        out.nounish.update(p.nounish)
        for key, forms in p.surface.items():
            out.surface.setdefault(key, Counter()).update(forms)
            out.first_seen.setdefault(key, index)
    return out


def _stem(word: str) -> str:
    """A crude singular, only to tell "rose" and "roses" apart as the same label word."""
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith(("sses", "xes", "zes", "ches", "shes")):
        return word[:-2]
    if word.endswith("s") and not word.endswith(("ss", "us", "is")) and len(word) > 3:
        return word[:-1]
    return word


def label_key(label: str) -> frozenset[str]:
    """What makes two labels the same: their content words, singular, in any order."""
    words = [_plain(w) for w in TOKEN.findall(label)]
    stop = STOP_WORDS.get(language_of(words), STOP_WORDS["en"])
    return frozenset(_stem(w) for w in words if w not in stop) or frozenset(words)


def same_label(a: str, b: str) -> bool:
    """Two labels a reader would take for one: the same content words, or one's inside the
    other's ("Garden" and "Garden roses")."""
    ka, kb = label_key(a), label_key(b)
    return ka <= kb or kb <= ka


def _verb_form(word: str) -> bool:
    """An English word in -ing or -ed that is most likely a verb ("Getting", "Finished")."""
    w = _plain(word)
    return len(w) > 4 and w.endswith(("ing", "ed")) and w not in _NOT_VERBS


def is_fragment(label: str) -> bool:
    """A label that reads as a piece of a sentence rather than a name: under two words, ending in
    a function word or a verb ("Tips for the first", "Warning light came"), or starting with a
    verb: one in -ing/-ed without an object ("Getting", "Finished already"), or a finite one
    ("Depends and instinct"). A label named for its period ("May–June 2024: moving, running, the
    React dashboard") is judged by its subjects, each of which may be one word."""
    if is_period_label(label):
        return any(_dangles(part, min_words=1) for part in period_subjects(label))
    return _dangles(_DATE_TAIL.sub("", label), min_words=2)


# The period a label may end with to tell it from a sibling ("Garden roses, 3 May 2023",
# "Brief exchange (May 2023)"): part of a name, not a word of it.
_MONTHS = "January|February|March|April|May|June|July|August|September|October|November|December"
_DATE_TAIL = re.compile(
    rf"(?:,\s*|\s+\()[\d\s–-]*(?:{_MONTHS})[\w\s–-]*?\d{{4}}\)?(?:\s*\(\d+\))?$"
)


def is_period_label(label: str) -> bool:
    """A label that names a period and its subjects ("May–June 2024: moving, running")."""
    head, colon, _ = label.partition(": ")
    return bool(colon) and bool(_HAS_DIGIT.search(head)) and len(head) <= 40


def period_subjects(label: str) -> list[str]:
    """The subjects a period's label lists ("moving", "running"); none for another label."""
    return label.partition(": ")[2].split(", ") if is_period_label(label) else []


def _dangles(phrase: str, *, min_words: int) -> bool:
    words = [w for w in TOKEN.findall(phrase) if not _DIGITS.fullmatch(w)]
    if len(words) < min_words or not words:
        return True
    lowered = [_plain(w) for w in words]
    stop = STOP_WORDS.get(language_of(lowered), STOP_WORDS["en"])
    last = word_key(words[-1])
    if len(words) > 1 and (last in stop or last in CONNECTORS or last in _DANGLING or last in _FINITE_VERBS):
        return True
    if len(words) == 1:
        return last in stop or last in _DANGLING or last in _FINITE_VERBS
    if lowered[0] in _FINITE_VERBS:
        return True
    if _verb_form(words[0]):
        rest = [w for w in lowered[1:] if w not in stop and w not in CONNECTORS]
        return not rest or all(_adverb(w, "en") for w in rest)
    return False


@dataclass
class Candidate:
    phrase: str  # as written most often
    key: str  # lowercased
    score: float


def candidates(found: Phrases, doc_freq: Counter, n_docs: int, *, pool: int = 12) -> list[Candidate]:
    """The `pool` best label candidates of 2-5 words by statistics, best first (`closest` then
    weighs in the embedder)."""
    if not found.phrases:
        return []
    weights = dict(ranked_words(found.words, doc_freq, n_docs))
    top_weight = max(weights.values(), default=1.0) or 1.0
    n_texts = max(1, max(found.phrases.values()))
    stop = STOP_WORDS[found.language]
    scored: list[Candidate] = []
    # A phrase nearly always part of one longer phrase ("counseling and mental" of "counseling
    # and mental health") is not a name on its own (C-value's idea).
    extended = _extensions(found.phrases)
    for key, count in found.phrases.items():
        words = key.split()
        if not 2 <= len(words) <= 5 or extended.get(key, 0) >= 0.7 * count:
            continue
        surface = found.surface[key].most_common(1)[0][0]
        if is_fragment(surface) or _clause_like(words, surface.split(), found):
            continue
        content = [word_key(w) for w in words if word_key(w) not in stop]
        # YAKE's intuition: a phrase of words that matter here, said more than once, not too long.
        relevance = sum(weights.get(w, 0.0) for w in content) / top_weight / len(content)
        repeated = 1 + math.log(count) / math.log(1 + n_texts) if n_texts > 1 else 1.0
        length = {2: 1.0, 3: 0.95, 4: 0.8, 5: 0.65}[len(words)]
        # Words that each stand apart (not one word twice) and a phrase seen early a little higher.
        distinct = len(set(content)) / len(content)
        early = 1.0 + 0.1 / (1 + found.first_seen.get(key, 0))
        scored.append(Candidate(surface, key, relevance * repeated * length * distinct * early))
    scored.sort(key=lambda c: (-c.score, c.key))
    return scored[:pool]


def _clause_like(words: Sequence[str], written: Sequence[str], found: Phrases) -> bool:
    """A phrase that reads as a piece of a clause rather than a name, judged by how the topic's
    own text uses its words: a word mostly following "I", "to", "is" ... is a verb's, one mostly
    following "the", "my", "a" ... a noun's. It starts with a verb ("Find solutions", "Played
    games"), ends with one ("Words motivate", "Dog laying", "Tattoo to remind"), or ends in a
    verb in -ing/-ed after a preposition ("Advice on reaching"). Names as written (capitalised
    inside the phrase: "Trip to Lisbon") are never taken for verbs."""
    def verb(i: int) -> bool:
        w = word_key(words[i])
        if i and written[i][:1].isupper():
            return False
        past = w.endswith("ed") and _verb_form(w)  # "Formed connections", "Played games"
        return found.verbish[w] > found.nounish[w] or (
            found.nounish[w] == 0 and (past or (_verb_form(w) and i > 0))
        )

    if verb(0) or (len(words) > 1 and verb(len(words) - 1)):
        return True
    return _verb_form(words[-1]) and words[-2] in CONNECTORS


def closest(
    found: Sequence[Candidate],
    vectors: dict[str, np.ndarray] | None = None,
    centroid: np.ndarray | None = None,
    *,
    limit: int = 12,
) -> list[Candidate]:
    """Candidates reordered by how close their embedding (`vectors`, by phrase) lies to the
    topic's `centroid`, added to their statistical standing; a phrase holding a better one (or
    held by it) is left out. Without vectors, the statistical order."""
    ranked = [Candidate(c.phrase, c.key, c.score) for c in found]
    if vectors and centroid is not None and len(ranked) > 1 and all(c.phrase in vectors for c in ranked):
        sims = np.array([float(np.dot(vectors[c.phrase], centroid)) for c in ranked])
        # e5 packs cosines tightly: a candidate's closeness counts by its standing among the
        # others (z-score).
        spread = float(np.std(sims)) or 1.0
        z = (sims - float(np.mean(sims))) / spread
        best = max(c.score for c in ranked) or 1.0
        for c, zc in zip(ranked, z, strict=True):
            c.score = c.score / best + 0.35 * float(zc)
        ranked.sort(key=lambda c: (-c.score, c.key))
    kept: list[Candidate] = []
    for c in ranked:
        if any(f" {k.key} " in f" {c.key} " or f" {c.key} " in f" {k.key} " for k in kept):
            continue
        kept.append(c)
    return kept[:limit]


def _extensions(phrases: Counter) -> dict[str, int]:
    """For each phrase, how many texts hold its most frequent longer phrase ("dry sense" of "dry
    sense of humor", "counseling and mental" of "counseling and mental health")."""
    longest: dict[str, int] = {}
    for key, n in phrases.items():
        words = key.split()
        for size in range(1, len(words)):
            for start in range(len(words) - size + 1):
                sub = " ".join(words[start : start + size])
                longest[sub] = max(longest.get(sub, 0), n)
    return longest


def fallback_label(keywords: Sequence[str]) -> str:
    """Two keywords when no phrase of two words or more exists ("Tulips and roses")."""
    words = [k for k in keywords if not is_id_like(k) and k.lower() not in _NEVER]
    if not words:
        return "(untitled)"
    if len(words) == 1:
        return words[0][0].upper() + words[0][1:]
    joiner = {"es": "y", "fr": "et", "pt": "e", "de": "und", "it": "e"}.get(language_of(words), "and")
    return f"{words[0][0].upper()}{words[0][1:]} {joiner} {words[1]}"


def capitalised(phrase: str) -> str:
    return phrase[:1].upper() + phrase[1:]


def choose(options: Sequence[str], taken: Iterable[str]) -> str | None:
    """The first of `options` that is not the same label as one of `taken`."""
    taken = list(taken)
    for option in options:
        if not any(same_label(option, t) for t in taken):
            return option
    return None


def distinct_labels(
    groups: Sequence[Sequence[str]], suffixes: Sequence[str], by_period: Sequence[bool] | None = None
) -> list[str]:
    """One label per sibling, from each one's options (best first), no two the same: earlier
    siblings in `groups` choose first; one whose options are all taken gets its best option
    with its suffix (its period: "Garden roses, May 2023"), numbered if even that is taken.
    A sibling named for its period (`by_period`: "May 2024: garden roses, the fence") only needs
    a string of its own: its subjects are its subtopics' names, and take none from its siblings."""
    by_period = by_period or [False] * len(groups)
    chosen: list[str] = []
    names: list[str] = []  # the chosen labels that are names (not periods)
    for options, suffix, period in zip(groups, suffixes, by_period, strict=True):
        if period:
            pick = options[0] if options and options[0] not in chosen else None
        else:
            pick = choose(options, names)
        if pick is None:
            base = options[0] if options else "(untitled)"
            base = f"{base}, {suffix}" if suffix and not period else base
            pick, n = base, 2
            while pick in chosen:
                pick, n = f"{base} ({n})", n + 1
        chosen.append(pick)
        if not period:
            names.append(pick)
    return chosen


def count_of(n: int, noun: str, plural: str | None = None) -> str:
    """"1 message", "2,345 messages"."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"
