"""Which clauses of a message are facts a person would keep, without a model.

A fact is one thing about a person, lasting or dated: who they are, their family and the names
in it, pets, home, work, education, health, diet and allergies, possessions, recurring
commitments, counts, preferences, plans with dates and the events of their life. It is said by
them, about themselves (or about someone they name: "Tom doesn't eat mushrooms"), in a clause of
their own. Never a fact: text they paste (code, a document, a long block after "here is…"),
requests and instructions to the assistant, questions, greetings and thanks, reactions to an
answer ("I think I'll try the first one"), the assistant's words (the caller reads only a
speaker's own messages).

An explicit request ("remember that…", "please note…", "don't forget…", "for future
reference…", "from now on…") is always a fact: the rest of the sentence (or the sentence before
"…, please remember that").

`clauses(text)` gives a message's candidate facts, best first, each with its kind and a score;
memory.knowledge.facts keeps the explicit ones and the best MAX_PER_MESSAGE others above
FACT_THRESHOLD.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

FACT_THRESHOLD = 2.0
MAX_PER_MESSAGE = 2
MAX_WORDS = 32
PASTE_PARAGRAPH_CHARS = 700  # a paragraph this long with no "I" in it was pasted, not written


@dataclass
class Clause:
    text: str  # the speaker's own words, first person (or a named subject's clause)
    kind: str
    score: float
    explicit: bool = False
    subject: str = ""  # a person the clause is about, when not the speaker ("Tom")
    instruction: bool = False  # "from now on, answer in Spanish": kept in the speaker's words


# --- The speaker's own words ---------------------------------------------------------------------

_FENCE = re.compile(r"```.*?(?:```|\Z)|~~~.*?(?:~~~|\Z)", re.S)
_QUOTE_LINE = re.compile(r"^\s*>.*$", re.M)
_LEAD_IN = re.compile(
    r"\b(?:here(?:'s| is| are)|below (?:is|are)|the following|this (?:text|article|email|e-mail|letter|code|"
    r"document|paragraph|essay|passage|message|post|script|log|error|output|snippet|draft|story|poem)|"
    r"paste[ds]?|proofread|summari[sz]e|translate|rewrite|re-write|paraphrase|edit|review|improve|"
    r"correct|fix|format|explain)\b",
    re.I,
)
_CODE_LINE = re.compile(
    r"[{};]\s*$|^\s{4,}\S|^\s*(?:def|class|import|from \S+ import|return|SELECT|INSERT|UPDATE|DELETE|"
    r"CREATE|for \w+ in|while|if|elif|else:|try:|except|#include|public|private|const|let|var|function|"
    r"\$ |>>>|<[a-z]+[ >/])|^\s*[\w.\[\]\"']+\s*[:=]\s*\S+\s*$|^\s*[-*]?\s*\w+\([^)]*\)\s*$"
)
_FIRST_SINGULAR = re.compile(r"\b(?:I|I'm|I've|I'd|I'll|my|me)\b")


_EMPHASIS = re.compile(r"\*\*|__|(?<!\w)[*_](?=\w)|(?<=\w)[*_](?!\w)")


def own_words(text: str) -> list[str]:
    """The paragraphs of a message the speaker wrote: without code, quoted lines, what follows
    a lead-in such as "here is the text:" or "can you proofread this?", and long paragraphs with
    no first person in them (a pasted document)."""
    text = _EMPHASIS.sub("", _QUOTE_LINE.sub(" ", _FENCE.sub(" ", text or "")))
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]
    kept: list[str] = []
    for i, paragraph in enumerate(paragraphs):
        lines = [ln for ln in paragraph.splitlines() if ln.strip()]
        if lines and sum(bool(_CODE_LINE.search(ln)) for ln in lines) > len(lines) / 2:
            continue  # code or a log
        if len(paragraph) > PASTE_PARAGRAPH_CHARS and not _FIRST_SINGULAR.search(paragraph[:400]):
            continue
        kept.append(paragraph)
        if i + 1 < len(paragraphs) and (paragraph.rstrip().endswith(":") or _LEAD_IN.search(paragraph)):
            break  # what follows was pasted for the assistant to work on
    return kept


# --- Sentences and clauses -----------------------------------------------------------------------

_SENTENCE = re.compile(
    r"(?<!\bDr\.)(?<!\bMr\.)(?<!\bMs\.)(?<!\bMrs\.)(?<!\bSt\.)(?<!\bJr\.)(?<!\bvs\.)(?<!\be\.g\.)(?<!\bi\.e\.)"
    r"(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9])|\n+"
)
# A tail that says how the speaker feels about it or what they want from the answer.
_TAIL = re.compile(
    r"(?:,\s*|\s+)(?:and|but|so)\s+(?:I(?:'m| am|'ll| will| want| need| think| was| wonder| hope| would|'d)|"
    r"(?:I'm|I am) (?:still )?(?:not sure|wondering|hoping|looking|excited|curious))\b.*$"
    r"|,\s+(?:which|and it|and that)(?:'s| is| was| has been| had been)? (?:been )?(?:really |so |very |"
    r"such |quite |pretty |a )?(?:great|nice|amazing|helpful|awesome|fun|good|motivating|a game-changer|"
    r"a nice|surprise|a big help|interesting).*$",
    re.I,
)
_DISCOURSE = re.compile(
    r"^(?:(?:oh|ah|um|well|so|and|but|also|anyway|anyways|btw|plus|actually|honestly|okay|ok|yeah|yes|no|"
    r"hmm|haha|lol|wow|oops|by the way|speaking of (?:which|[^,]{1,40})|on (?:a|another) (?:side )?note|"
    r"as i (?:mentioned|said)(?: earlier| before)?|as mentioned|for (?:instance|example)|in fact|"
    r"to be honest|fun fact|just so you know|"
    r"i (?:should|forgot to) mention(?: that)?|i wanted to (?:mention|say|share|tell you)(?: that)?|"
    r"i(?:'m| am) happy to (?:report|share) that|quick update|update|incidentally|to correct myself|"
    r"(?:wait,?\s+)?i apologi[sz]e for (?:the|my) (?:mistake|confusion)(?: earlier)?|to clarify|"
    r"just to clarify)\b[,:;!.-]*\s*)+",
    re.I,
)
_HEDGE = re.compile(
    r"^I\s+(?:think|guess|suppose|believe|remember|recall|realized|realised|reckon|figure|feel like|"
    r"must (?:say|admit)|have to (?:say|admit)|should (?:say|mention)|just (?:realized|remembered)|"
    r"(?:just )?(?:checked|counted|noticed)\s+and|was (?:just |)thinking,?|(?:realized|realised|remembered|"
    r"noticed|learned)\s+how\s+much|(?:just )?wanted to (?:say|share|"
    r"mention|let you know),?)\s+(?:that\s+)?(?=(?:I|my|we|our|My|We|Our)\b)",
)
# A statement inside a question: "..., considering I've done 2,000 miles on it?"
_EMBEDDED = re.compile(
    r"(?:,\s*|\s-\s|\s)(?:considering(?: that)?|since|given(?: that)?|because|as|especially since|"
    r"remember when|the one where|which|where|now that|seeing as)\s+(?P<clause>(?:I|I'm|I've|I'd|my|we|we're|"
    r"we've|our)\b[^?]*)\?*$",
    re.I,
)


def sentences(text: str) -> list[str]:
    out: list[str] = []
    for paragraph in own_words(text):
        for sentence in _SENTENCE.split(paragraph):
            sentence = " ".join(sentence.split())
            if sentence:
                out.append(sentence)
    return out


def _bare(clause: str) -> str:
    """A clause without its discourse markers and hedges ("By the way, I think I spent…" ->
    "I spent…")."""
    previous = None
    clause = clause.strip(" -–—*_\"'")
    while previous != clause:
        previous = clause
        clause = _DISCOURSE.sub("", clause).lstrip(" ,;:-–—")
        clause = _HEDGE.sub("", clause)
    if clause[:1].islower() and re.match(r"(?:i|i'm|i've|i'd|i'll)\b", clause):
        clause = "I" + clause[1:]
    elif re.match(r"(?:my|we|our)\b", clause):
        clause = clause[:1].upper() + clause[1:]
    return clause


def _shorten(clause: str) -> str:
    """At most MAX_WORDS words: cut at a clause boundary, else at the limit."""
    clause = _TAIL.sub("", clause).rstrip(" ,;:-–—")
    words = clause.split()
    if len(words) <= MAX_WORDS:
        return clause
    cut = re.search(r"^(.{40,}?)(?:,\s+(?:and|but|so|which|because|since)\b|;|\s[-–—]\s|,\s+(?:I|it)\b)",
                    clause)
    if cut and len(cut[1].split()) <= MAX_WORDS:
        return cut[1]
    return " ".join(words[:MAX_WORDS]).rstrip(",;:")


# --- What is not a fact --------------------------------------------------------------------------

_REQUEST = re.compile(
    r"^(?:please\s+)?(?:help|write|explain|give|tell|make|create|list|show|suggest|recommend|summari[sz]e|"
    r"translate|rewrite|re-write|generate|describe|compare|find|check|provide|draft|outline|design|plan|"
    r"calculate|convert|fix|correct|proofread|edit|review|improve|add|remove|change|use|keep|imagine|act|"
    r"pretend|continue|answer|respond|reply|name|define|analy[sz]e|evaluate|brainstorm|share|send|search|"
    r"look|research|teach|walk|guide|remind|let's|lets|let me|can you|could you|would you|will you|do you|"
    r"are there|is there|what|how|why|when|where|which|who|any (?:tips|ideas|suggestions|advice)|"
    r"i (?:want|need|would like|'d like) you to|i(?:'d| would) (?:like|love|appreciate) (?:some|a|an|more|"
    r"your|to (?:know|learn|hear|see|get|find|ask|understand|try|explore|read))|i(?:'m| am) (?:looking|"
    r"searching) for|i was (?:wondering|hoping)|i(?:'m| am) wondering|i wonder|i need (?:some|a|an|help|"
    r"advice|tips|ideas|suggestions|recommendations|to (?:know|figure|find|come up|decide|"
    r"write|create|prepare|plan|organi[sz]e|learn|understand))|i want to (?:know|learn|understand|find|"
    r"make sure|see|get some)|i(?:'m| am) (?:curious|interested) (?:about|to|in (?:learning|knowing|"
    r"finding|hearing|getting))|i(?:'m| am) trying to (?:decide|figure|find|understand|come up|choose|"
    r"work out|learn more))\b",
    re.I,
)
_REACTION = re.compile(
    r"^(?:thanks|thank you|thx|ty|cheers|hi|hello|hey|great|awesome|cool|nice|perfect|wonderful|amazing|"
    r"sounds|that(?:'s| is| sounds| was)|this (?:is|sounds|was|looks)|these (?:are|sound)|those (?:are|"
    r"sound)|"
    r"it(?:'s| is) (?:great|good|nice|interesting|helpful|fascinating|amazing|reassuring|frustrating|"
    r"important)|good (?:idea|point|to know|luck)|i agree|i disagree|i understand|i appreciate|"
    r"i hope|i wish|i(?:'m| am) (?:not sure|unsure|confused|still not sure)|i had no idea|i didn't know|"
    r"i never knew|i can't wait|i (?:really |totally |completely )?(?:like|love|appreciate|agree with) "
    r"(?:the|that|this|these|those|your|it|how|what|all|each|both|them|some of)\b|"
    r"i(?:'ll| will) (?:definitely |probably |also |certainly |surely |be sure to |)(?:try|check|look|"
    r"consider|"
    r"give|keep|take|go|use|add|start|make sure|have to|think|do|need|be|get|follow|stick|look into|"
    r"reach out|let you know|remember)|"
    r"i(?:'m| am) definitely\b|i (?:think|feel|believe|guess|suppose)\b(?!\s+(?:that\s+)?(?:i|my)\b)|"
    r"i(?:'m| am) (?:definitely |really |)going to (?:try|check|give|look|start|use|add|make|follow|do|"
    r"take|have to|keep|consider)|i think (?:i'll|i will|i'm going to|that|this|it|these|those|the|it's|"
    r"you|we|so|maybe|both)|"
    r"i(?:'m| am) (?:so |really |very |also |)(?:glad|excited|happy|thrilled|grateful|thankful|impressed|"
    r"surprised|sorry|pleased|relieved|amazed|intrigued|eager) (?:to|that|you|about|for|with|by|i)|"
    r"i (?:also |really |)love (?:how|it when|that|the way)\b|i (?:found|find) (?:this|that|these|it|your|"
    r"those)|i see(?:\s*[,.!]|\s+(?:what|how|that|why|your|now|"
    r"the point))|i(?:'m| am) (?:leaning|thinking) (?:towards?|about)"
    r"|i like (?:that|this|the) idea|i have (?:a|another|one more|some|few|a few) (?:question|questions)|"
    r"i(?:'ve| have|) (?:heard|read|noticed|learned|learnt|realized|realised|saw|seen) (?:that|of|about|"
    r"great|good|"
    r"they|it|how|somewhere|online|stories)|i (?:assume|imagine|bet|doubt|feel that|am sure)|i(?:'m|"
    r" am) (?:sure|certain) (?:that|it|"
    r"they|you))\b",
    re.I,
)
_SECOND_PERSON_START = re.compile(r"^(?:you|your|you're|you've|you'll)\b", re.I)
_ADDRESSED = re.compile(r"\b(?:you|your|you're|you've|you'll|yours|chatgpt|assistant)\b", re.I)
_FUTURE = re.compile(r"^I(?:'ll| will| shall)\b")

# --- What makes a fact ---------------------------------------------------------------------------

_REL = (
    r"wife|husband|partner|spouse|boyfriend|girlfriend|fianc[eé]e?|son|daughter|kids?|children|child|"
    r"baby|toddler|mom|mum|mother|dad|father|parents?|sister|brother|siblings?|twins?|grandma|grandmother|"
    r"grandpa|grandfather|grandparents?|aunt|uncle|cousin|niece|nephew|family|in-laws?|stepson|stepdaughter"
)
_CIRCLE = (
    r"friend|best friend|colleague|coworker|co-worker|manager|boss|roommate|flatmate|neighbou?r|teammate|"
    r"mentor|therapist|doctor|dentist|trainer|coach|teacher|professor|landlord|classmate"
)
_COLLEAGUE = r"colleague|coworker|co-worker|manager|boss|teammate|mentor|clients?|employees?|reports"
_FRIEND = r"friend|best friend|roommate|flatmate|neighbou?r|classmate|landlord|coach|trainer|teacher"
_PET = r"dog|cat|puppy|kitten|pet|horse|rabbit|bunny|hamster|parrot|guinea pig|fish|turtle|lizard|snake"
_KINDS: list[tuple[str, float, re.Pattern[str]]] = [
    ("health", 2.6, re.compile(
        r"\b(?:I(?:'m| am| was| have| had|'ve been| suffer| struggle| take| see|"
        r" get)\b[^.;]{0,30}?\b(?:allergic|"
        r"allerg(?:y|ies)|intoleran(?:t|ce)|celiac|coeliac|diabet(?:es|ic)|asthma|adhd|autis\w+|migraines?|"
        r"arthritis|anxiety|depression|diagnosed|pregnant|surgery|injur(?:y|ed)|blood pressure|medication|"
        r"therapy|therapist|chronic|disorder|insomnia|eczema|dr\.? [A-Z]\w+)|my (?:allerg(?:y|ies)|"
        r"doctor|therapist|diagnosis|medication|surgery|injury|condition|blood pressure|anxiety|depression|"
        r"asthma|diabetes|migraines?|back pain|knee))\b", re.I)),
    ("diet", 2.5, re.compile(
        r"\b(?:I(?:'m| am| have been|'ve been) (?:a |now |strictly |mostly |)(?:vegan|vegetarian|pescatarian|"
        r"gluten[- ]free|dairy[- ]free|keto|on a diet|lactose intolerant)|(?:don't|doesn't|do not|does not|"
        r"can't|cannot|never|won't)(?: want to| like to)? (?:eat|drink|touch)|"
        r"I(?:'m| am) (?:trying to |)(?:avoid|cut(?:ting)? "
        r"(?:out|back on)|reduc)\w* (?:my )?(?:sugar|meat|dairy|gluten|carbs|caffeine|alcohol|salt))\b",
        re.I)),
    ("family", 2.3, re.compile(
        rf"\b(?:my|our) (?:(?:\w+ )?(?:{_REL}))\b|\bI have (?:a |an |\w+ )?(?:{_REL})\b|"
        r"\bI(?:'m| am) (?:married|engaged|divorced|single|widowed|a (?:mom|mother|dad|father|parent))\b",
        re.I)),
    ("pet", 2.3, re.compile(rf"\b(?:my|our) (?:(?:\w+ )?(?:{_PET})s?)\b|\bI (?:have|adopted|got) (?:a|an|two|"
                            rf"three|\d+) (?:\w+ )?(?:{_PET})s?\b|^I (?:\w+ )?adopted\b", re.I)),
    ("identity", 2.4, re.compile(
        r"^(?:I(?:'m| am) (?:a|an) (?!bit\b|little\b|lot\b|huge fan|big fan|fan\b)[\w-]+|My name is|"
        r"I(?:'m| am) \d{1,2}(?: years old)?\b|I(?:'m| am) (?:originally )?from [A-Z]|I grew up|"
        r"I was born|I work as|I identify as|I(?:'m| am) (?:retired|a student|self-employed|unemployed))",
        re.I)),
    ("home", 2.2, re.compile(
        r"\b(?:(?:I|we) (?:\w+ )?(?:live|lived|moved|relocated)|I(?:'ve| have) been living|I(?:'m|"
        r" am) (?:now )?living|"
        r"my (?:new )?(?:apartment|house|home|flat|place|neighbou?rhood|hometown|condo|studio apartment|"
        r"backyard|garden))\b", re.I)),
    ("work", 2.2, re.compile(
        rf"\b(?:I (?:\w+ )?(?:work|worked)\b|I(?:'m| am) (?:working|employed|a manager|the)|I lead\b|I led\b|"
        r"I manage\b|I(?:'ve| have) been working|I (?:got|was) (?:hired|promoted|laid off|fired|a job|"
        r"the job|a promotion|an offer)|I (?:just |recently |finally |)(?:started|start|quit|left|"
        r"joined) (?:a |my |the )?(?:new )?"
        r"(?:job|role|position|company|team)|I(?:'m| am) (?:starting|joining)|I retired|"
        rf"my (?:new |old |previous |former |current )?(?:job|employer|company|team|role|position|office|"
        rf"startup|"
        rf"business|{_COLLEAGUE}))\b", re.I)),
    ("people", 2.2, re.compile(rf"\bmy (?:(?:best|old|close|new|good)\s+)?(?:{_FRIEND})s?\b", re.I)),
    ("education", 2.2, re.compile(
        r"\b(?:I graduated|I(?:'m| am) (?:studying|majoring|enrolled|in (?:college|school|grad school))|"
        r"I studied|my (?:degree|major|thesis|dissertation|university|college|phd|master'?s|diploma|"
        r"classes|course|exams?|professor)|I(?:'m| am) (?:taking|doing) (?:a|an|my) \w+ (?:course|class|"
        r"degree))\b",
        re.I)),
    ("routine", 2.0, re.compile(
        r"\b(?:every (?:day|morning|evening|night|week|weekend|month|year|other \w+|\w+day|two weeks|"
        r"few \w+)|on (?:mondays|tuesdays|wednesdays|thursdays|fridays|saturdays|sundays|weekends|weekdays)|"
        r"(?:once|twice|\w+ times) a (?:day|week|month|year)|daily|weekly|monthly|routine|"
        r"I (?:usually|always|normally|tend to)\b.*\b(?:\d|am|pm|morning|evening|night|weekend|\w+days?)|"
        r"\b(?:usually|normally|always)\b.*\b\d{1,2}(?::\d{2})?\s?(?:am|pm)\b|"
        r"I(?:'ve| have)? (?:just |recently |finally |)(?:started|begun|stopped|quit|switched to|taken up|"
        r"took up|gotten into|got into|been sticking to)\s+(?:\w+ing|my|a|the)\b)\b", re.I)),
    ("count", 2.0, re.compile(
        r"^(?:I|I'm|I've|My|We|We've|We're|Our)\b.*?\b(?:\d[\d,.]*|two|three|four|five|six|seven|eight|"
        r"nine|ten|eleven|twelve|fifteen|twenty|thirty|forty|fifty|a hundred|a dozen|several)\s+"
        r"(?:(?:[\w-]+\s+){0,2}?[a-z][\w-]*s\b|dozen\b)", re.I)),
    ("goal", 1.9, re.compile(
        r"^I(?:'m| am) (?:still |now |really |)(?:determined|aiming|aim|working|training|saving) (?:to|"
        r"for)\b|"
        r"^My goal is|^I want to (?:reach|hit|get to|run|finish|lose|save|learn|become)", re.I)),
    ("preference", 2.0, re.compile(
        r"^(?:I (?:really |absolutely |just |also |still |)(?:love|like|enjoy|prefer|adore|hate|dislike|"
        r"can't stand|don't like|do not like|don't enjoy)|My (?:all-time )?favou?rite|"
        r"I(?:'m| am) (?:a (?:big |huge )?fan of|into|obsessed with|passionate about|not a fan of))\b",
        re.I)),
    ("plan", 1.9, re.compile(
        r"^(?:I(?:'m| am) (?:\w+ly |just |also |still |now |)(?:planning|going|hoping|about|scheduled|"
        r"due) to|I plan to|I(?:'m| am) "
        r"(?:flying|travell?ing|moving|visiting|heading|getting married|starting)\b|My (?:\w+ )?(?:trip|"
        r"flight|wedding|appointment|interview|vacation|holiday|party|exam|surgery|move|visit|birthday)|"
        r"I(?:'ve| have) (?:booked|scheduled|signed up)|I(?:'ll| will) be (?:\w+ing|in|at|away|moving)|"
        r"I(?:'m| am) \w+ing\b.*\b(?:next|tomorrow|tonight|this (?:week|weekend|month|summer|fall|winter|"
        r"spring)|"
        r"at the (?:end|start|beginning) of|in (?:January|February|March|April|May|June|July|August|"
        r"September|"
        r"October|November|December)|on (?:Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday)))",
        re.I)),
    ("possession", 1.8, re.compile(
        r"\b(?:I (?:just |recently |finally |also |)(?:have|own|bought|got|purchased|ordered|picked up|"
        r"received|inherited|built|use)|I(?:'ve| have) (?:got|bought|had)|my (?:new|old|current) \w+|"
        r"I(?:'m| am) (?:\w+ly |)(?:buying|selling|renting|leasing))\b",
        re.I)),
]
_NAME = r"[A-Z][a-zà-ÿ]+(?:\s+[A-Z][a-zà-ÿ]+)?"
_NAMED_SUBJECT = re.compile(
    rf"^(?P<name>(?!(?:He|She|They|It|We|You|His|Her|Their)\b){_NAME})(?:'s \w+)?\s+(?:(?:just|recently|now|"
    rf"still|also|really|actually|usually|always|"
    r"never)\s+)?(?:doesn't|does not|can't|cannot|won't|isn't|is|was|has|had|loves|likes|hates|lives|"
    r"works|eats|plays|wants|needs|got|started|moved|turned|graduated|studies|teaches|runs|owns|prefers|"
    r"enjoys|adores|visited|joined|left|became)\b"
)
_NOT_A_NAME = {
    "This", "That", "These", "Those", "There", "Here", "It", "What", "Which", "Who", "How", "When",
    "Where", "Why", "Everything", "Everyone", "Nothing", "Someone", "Something", "Anyone", "Each",
    "Every", "Some", "Most", "All", "One", "Another", "Today", "Tomorrow", "Yesterday", "Life", "Work",
    "Time", "The", "A", "An", "And", "But", "So", "Also", "Then", "Now", "Yes", "No", "Mine", "Yours",
    "Ours"
}
_WE_MOVE = re.compile(r"^We(?:'re| are) (?P<rest>(?:moving|relocating|flying|travell?ing|getting married|"
                      r"emigrating) .*)")
_FIRST_START = re.compile(r"^(?:I|I'm|I've|I'd|I'll|My)\b")
_WE_START = re.compile(r"^(?:We|We're|We've|Our)\b")
_NUMBER = re.compile(
    r"\$?\b\d[\d,.:]*\b|\b(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|fifteen|"
    r"twenty|thirty|forty|fifty|hundred|dozen|first|second|third|fourth|fifth|half)\b",
    re.I,
)
_PROPER = re.compile(r"(?<!^)(?<![.!?]\s)\b[A-Z][a-zà-ÿ]+")
_DATE_WORD = re.compile(
    r"\b(?:yesterday|today|tomorrow|tonight|last|next|ago|since|this (?:week|month|year|weekend)|"
    r"January|February|March|April|May|June|July|August|September|October|November|December|"
    r"Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday|\d{1,2}/\d{1,2}|\d{4})\b"
)
_PAST = re.compile(
    r"^I (?:just |recently |finally |also |actually |already |even |)(?:\w+ed|went|got|took|made|had|did|"
    r"saw|met|found|bought|began|won|lost|ran|gave|left|came|wrote|read|built|became|brought|taught|"
    r"held|sold|caught|spent|finished|attended|visited|tried|completed|reached|hit|scored|redeemed|"
    r"wore|swam|flew|drove|rode|sang|threw|grew|drew|felt|kept|paid)\b|^I(?:'ve| have) (?:just |"
    r"recently |finally |already |also |been |)(?:\w+ed|been|gone|got|gotten|taken|made|had|done|"
    r"seen|met|found|bought|begun|won|lost|run|given|written|read|built|become|caught|spent|worn|"
    r"watched|finished|reached|visited|managed)\b"
)
_VAGUE = re.compile(
    r"^I(?:'ve| have) been (?:trying|thinking|meaning|wanting|looking|hoping|struggling|wondering|"
    r"considering|feeling)\b|^I(?:'m| am) (?:trying|thinking|hoping|struggling|wondering|considering|"
    r"feeling|worried|concerned|a bit|a little|kind of|sort of|not|still having|having a hard time|"
    r"having trouble)\b|"
    r"^I (?:was|am) thinking\b",
    re.I,
)


def _kind(clause: str) -> tuple[str, float]:
    for name, weight, pattern in _KINDS:
        if pattern.search(clause):
            return name, weight
    if _PAST.search(clause):
        return "event", 1.4
    return "", 0.0


def score_clause(clause: str) -> tuple[str, float]:
    """(kind, score) of a clause that speaks as the speaker: its kind's weight, and what makes
    it concrete (numbers, names, dates), against vagueness and length."""
    kind, weight = _kind(clause)
    if not kind:
        return "", 0.0
    words = len(clause.split())
    score = weight
    score += 0.8 * min(2, len(_NUMBER.findall(clause)))
    score += 0.5 * min(2, len(_PROPER.findall(clause)))
    score += 0.5 * bool(_DATE_WORD.search(clause))
    concrete = bool(_NUMBER.search(clause) or _PROPER.search(clause))
    score -= (0.3 if concrete else 0.8) * bool(_VAGUE.search(clause))
    score -= 0.6 * bool(re.search(r"\b(?:you|your)\b", clause, re.I))
    score -= 0.8 * bool(re.search(r"\b(?:it|this|that|these|those|them|one)\b", clause.split(",")[0]) and
                        words < 8)
    score -= 1.0 * (words < 4 and weight < 2.2)  # "I got it." says nothing; "I'm vegetarian." does
    score -= 0.03 * max(0, words - 20)
    return kind, score


# --- Explicit requests to remember ---------------------------------------------------------------

_REMEMBER_BEFORE = re.compile(
    r"^(?:(?:please|pls|and|also|oh|so)\s*,?\s*)*(?:(?:can|could|would) you\s+)?(?:please\s+)?(?:remember|"
    r"(?<=please )note that|make a note(?: that)?|keep in mind|don't forget|do not forget|never forget|"
    r"bear in mind|memori[sz]e)"
    r"(?:\s+(?:this|that))?(?:\s+for (?:me|later|the future|future reference))?"
    r"(?:\s+(?:that|this))?\s*[:,-]?\s+(?P<rest>(?!to\s)\S.*)$",
    re.I,
)
_REMEMBER_PREFIX = re.compile(
    r"^(?:(?:please|pls|and|also|oh|so)\s*,?\s*)*(?:for (?:future|your) reference|for the record|"
    r"from now on|just so you know for later)\s*[:,-]?\s+(?P<rest>\S.*)$",
    re.I,
)
_REMEMBER_AFTER = re.compile(
    r"^(?P<rest>.+?)[,;:-]?\s+(?:please\s+|so\s+|and\s+)?(?:remember|note|keep in mind|don't forget|"
    r"make a note of|memori[sz]e)\s+(?:that|this|it)(?:\s+for (?:me|later|the future|future reference))?"
    r"(?:,?\s+please)?[.!]*$",
    re.I,
)
_BARE_REMEMBER = re.compile(
    r"^(?:please\s+|and\s+|so\s+)?(?:remember|note|keep in mind|don't forget|make a note of|memori[sz]e)\s+"
    r"(?:that|this|it)(?:\s+for (?:me|later|the future|future reference))?(?:,?\s+please)?[.!]*$",
    re.I,
)
_IMPERATIVE = re.compile(
    r"^(?:please\s+)?(?:call|answer|reply|respond|write|use|address|speak|talk|keep|always|never|don't|"
    r"do not|avoid|stop|start|give|show|tell|refer|format|be)\b",
    re.I,
)


def _remembered(sentences_: list[str], used: set[int] | None = None) -> list[Clause]:
    """The explicit requests of these sentences; `used` gets the indices of the sentences they
    took (the request and the sentence it points back to)."""
    used = set() if used is None else used
    found: list[Clause] = []
    for i, sentence in enumerate(sentences_):
        body = sentence.strip()
        rest = ""
        if _BARE_REMEMBER.match(body):
            rest = sentences_[i - 1] if i > 0 else ""  # "I'm allergic to peanuts. Please remember that."
            used.add(i - 1)
        elif (m := _REMEMBER_BEFORE.match(body)) or (m := _REMEMBER_PREFIX.match(body)):
            rest = m["rest"]
        elif m := _REMEMBER_AFTER.match(body):
            rest = m["rest"]  # "I'm allergic to peanuts, please remember that."
        rest = _bare(rest.strip().rstrip("?"))
        if len(rest.split()) < 2:
            continue
        rest = _shorten(rest.rstrip(".!") + ".") if not rest.endswith((".", "!")) else _shorten(rest)
        if re.match(r"^(?:that|this)\b", rest, re.I):
            rest = re.sub(r"^(?:that|this)\s+", "", rest, flags=re.I)
        instruction = bool(_IMPERATIVE.match(rest)) or bool(_SECOND_PERSON_START.match(rest))
        if instruction and _REMEMBER_PREFIX.match(body):
            rest = sentence.strip()  # "From now on, answer in Spanish." in the person's words
        found.append(Clause(rest[:1].upper() + rest[1:], "remember", 10.0, explicit=True,
                            instruction=instruction))
        used.add(i)
    return found


# --- A message's facts ---------------------------------------------------------------------------


_LEADING = re.compile(
    r"^(?:since|as|because|given that|now that|considering(?: that)?)\s+(?P<clause>(?:I|I'm|I've|my|we|we're|"
    r"we've|our)"
    r"\b[^,]{8,}),\s+",
    re.I,
)
_FRONTED = re.compile(
    r"^(?:(?:during|after|before|when|while|since|last|this|on|in|at|yesterday|today|recently|a few|two|"
    r"three|"
    r"back in|earlier|over|for)\b[^,]{0,80}(?:,[^,]{0,80})?,\s+|(?:last|this|next) (?:week|weekend|month|"
    r"year|night|summer|"
    r"winter|spring|fall|\w+day)\s+|(?:yesterday|today|recently|earlier today|this morning|tonight)\s+|"
    r"(?:a few|two|three|four|five|several|\d+) (?:days|weeks|months|years) ago,?\s+)(?=(?:I|I'm|I've|I'd|"
    r"my)\b)",
    re.I,
)
_STATED_THEN_ASKED = re.compile(
    r"^(?P<clause>(?:I|I'm|I've|My|We|We're|We've|Our)\b[^?]{6,}?),?\s+(?:so|and|but)\s+(?=(?:can|could|"
    r"would|will|"
    r"do|does|is|are|any|what|how|which|should|where|when)\b)",
)
_PARTS = re.compile(
    r"(?:,\s*|\s+)(?:and|but|so)\s+(?=(?:I|I'm|I've|I'd|my|we|we've|we're)\b)|;\s+|"
    r"\s[-–—]\s+")


def _candidates(sentence: str) -> list[str]:
    """The statements a sentence makes as its speaker: the sentence and its parts, unless it
    asks or requests; from a question or request, the statement it carries ("…, considering
    I've done 2,000 miles on it?", "Since I moved to Porto, can you…", "… - I spent 10 hours")."""
    bare = _bare(sentence)
    if not bare:
        return []
    question = bare.rstrip().endswith("?")
    if not question and not _REQUEST.match(bare) and not _ADDRESSED.search(bare):
        whole = bare
        parts = [_bare(p) for p in _PARTS.split(bare) if p and len(p.split()) >= 3]
        # "I'm planning to stay on Oahu, so the bay sounds perfect": the statement before the tail.
        head = re.split(r",\s+(?:so|and|but|which|because|since|as|where)\s+(?!I\b|I'|my\b|we\b)", whole)[0]
        if head != whole and len(head.split()) >= 4:
            parts.append(head)
        return [whole] + [p for p in parts if p != whole]
    found = []
    if m := _LEADING.match(bare):
        found.append(_bare(m["clause"]) + ".")
    if m := _STATED_THEN_ASKED.match(bare):  # "I'm a nurse, so can you suggest shoes…?"
        found.append(m["clause"] + ".")
    pieces = re.split(r"\s[-–—]\s+", bare)
    for piece in pieces[1:]:
        piece = _bare(piece)
        if not piece.rstrip().endswith("?") and not _REQUEST.match(piece):
            found.append(piece)
    if embedded := _EMBEDDED.search(bare):
        clause = _bare(embedded["clause"])
        found.append(clause[:1].upper() + clause[1:].rstrip(" ?") + ".")
    return found


_INTRODUCED = re.compile(
    rf"\b(?:[Mm]y|[Oo]ur) (?:(?:little|big|older|younger|best|old|new|dear|late)\s+)?(?:{_REL}|{_CIRCLE}|"
    rf"{_PET})s?,?\s+"
    rf"(?P<a>{_NAME})\b|(?P<b>{_NAME}),\s+(?:[Mm]y|[Oo]ur) (?:\w+\s+)?(?:{_REL}|{_CIRCLE}|{_PET})\b"
)


def people_named(text: str) -> set[str]:
    """The people (and pets) a message names as the speaker's own: "my sister Ana", "Tom, my
    partner", "our cat Luna". A clause about them ("Tom doesn't eat mushrooms") is a fact."""
    found = set()
    for m in _INTRODUCED.finditer(text or ""):
        name = (m["a"] or m["b"]).split()[0]
        if name not in _NOT_A_NAME:
            found.add(name)
    return found


_CONTENT = re.compile(r"[a-z][a-z'-]{3,}")
_COMMON = {
    "that", "this", "with", "have", "from", "they", "them", "their", "what", "when", "where", "which",
    "while", "about", "would", "could", "should", "there", "been", "were", "will", "just", "really",
    "also", "very", "much", "more", "some", "like", "love", "make", "made", "want", "need", "going",
    "into", "your", "yours", "mine", "know", "think", "thing", "things", "time", "good", "great",
    "well", "still", "even", "only", "over", "back"
}


def _content(text: str) -> set[str]:
    return {w.rstrip("s") for w in _CONTENT.findall(text.lower()) if w not in _COMMON}


_GENERAL_LIKING = re.compile(
    r"^I (?:also |really |just |absolutely )?(?:love|like|enjoy|adore) (?:\w+ing|"
    r"a good)\b")
_POINTING = re.compile(
    r"\b(?:these|those) (?!days\b|years?\b|months?\b|weeks?\b)\w+|\bon the list\b|"
    r"\bthis (?!week|weekend|month|year|summer|winter|spring|fall|autumn|morning|afternoon|evening|time|"
    r"past)\w+",
    re.I,
)


def echoes(clause: str, answer: str) -> bool:
    """Whether a clause mostly repeats the answer it replies to ("I love attending festivals, so
    I'll check out Tafwyl" after a list of festivals): a reaction, not news about the speaker."""
    words = _content(clause)
    return len(words) >= 3 and len(words & _content(answer)) / len(words) >= 0.7


def _judge(clause: str, people: set[str], said: set[str], explicit: list[Clause],
           answer: str = "") -> Clause | None:
    """The clause as a candidate fact (its kind and score), or None when it is none."""
    if clause.rstrip(".!").lower() in said or any(clause.rstrip(".!") in c.text for c in explicit):
        return None
    if _REQUEST.match(clause) or _REACTION.match(clause) or _ADDRESSED.search(clause):
        return None  # a request, a reaction to an answer, or words about the conversation
    if _FUTURE.match(clause) and not (_DATE_WORD.search(clause) or _NUMBER.search(clause)):
        return None  # "I'll focus on my niche": an intention of the moment, not a plan
    subject = ""
    core = _bare(_FRONTED.sub("", clause))  # "Last week I adopted…" is read as "I adopted…"
    fronted = core != clause
    if _FIRST_START.match(core):
        pass
    elif moving := _WE_MOVE.match(clause):  # "We're moving to Berlin in June": the speaker's plan too
        core = "I'm " + moving["rest"]
    elif _WE_START.match(clause):
        # "We have two kids", "our fridge has 20 dozen eggs": kept only for a life's things.
        if not re.search(rf"\b(?:{_REL}|{_PET}|house|home|apartment|fridge|garden|car|kids)\b", clause, re.I):
            return None
    elif (m := _NAMED_SUBJECT.match(clause)) and m["name"].split()[0] in people:
        subject = m["name"].split()[0]
    else:
        return None
    kind, score = score_clause(core)
    score += 0.5 * fronted  # a time it names
    if answer and not _NUMBER.search(core) and echoes(clause, answer):
        score -= 1.0
    if kind == "preference" and (clause.endswith("!") or _GENERAL_LIKING.match(core)):
        score -= 0.3  # "I love going to the beach!": a mood more than a preference to keep
    if _POINTING.search(clause):
        score -= 0.6  # "one of these festivals", "those games on the list": about the answer
    if kind == "plan" and re.search(r"\bgoing to [a-z]+", core) and not _DATE_WORD.search(core):
        score -= 0.6  # "I'm going to build a website": an intention of the moment, not a dated plan
    if subject and not kind:
        kind, score = "about someone", 2.2 + 0.5 * bool(_NUMBER.search(clause))
    if not kind:
        return None
    return Clause(clause[:1].upper() + clause[1:], kind, score, subject=subject)


def clauses(text: str, people: set[str] | frozenset[str] = frozenset(), answer: str = "") -> list[Clause]:
    """A message's candidate facts, the explicit ones first, then by score. `people`: the names
    the speaker has called their own before (people_named), whose clauses are facts too;
    `answer`: the message it replies to (a clause that mostly repeats it is a reaction)."""
    people = set(people) | people_named(text)
    parts = sentences(text)
    used: set[int] = set()
    explicit = _remembered(parts, used)
    said = {c.text.rstrip(".!").lower() for c in explicit}
    found: list[Clause] = []
    for i, sentence in enumerate(parts):
        if i in used:
            continue
        best: Clause | None = None
        for candidate in _candidates(sentence):
            clause = _judge(_shorten(candidate), people, said, explicit, answer)
            if clause and (best is None or clause.score > best.score):
                best = clause
        if best:
            found.append(best)
    found.sort(key=lambda c: -c.score)
    return explicit + found


def facts_of(text: str, people: set[str] | frozenset[str] = frozenset(), answer: str = "") -> list[Clause]:
    """What a message gives as facts: every explicit request, and its best clause above
    FACT_THRESHOLD (at most MAX_PER_MESSAGE of them)."""
    found = clauses(text, people, answer)
    explicit = [c for c in found if c.explicit]
    others = [c for c in found if not c.explicit and c.score >= FACT_THRESHOLD]
    kept = others[:MAX_PER_MESSAGE]
    return explicit + kept


def carries_a_request(sentence: str) -> bool:
    """Whether a sentence asks or requests something of the assistant (its attribute rules are
    not read: "Can you find flats since I live in Porto?" is read by the clause rules)."""
    bare = _bare(sentence)
    return bare.rstrip().endswith("?") or bool(_REQUEST.match(bare)) or bool(_ADDRESSED.search(bare))


def explicit_requests(text: str) -> list[Clause]:
    """Only the explicit "remember that…" facts of a message (what a chat turn saves at once)."""
    return _remembered(sentences(text))


def acceptable(fact: str, message: str) -> bool:
    """Whether a fact a model proposes passes the rules' "never a fact" tests: not a request,
    question, greeting or reaction, not about the conversation, short, and drawn from the
    speaker's own words of `message` (most of its content words are there, not only in what was
    pasted)."""
    bare = _bare(fact)
    if not bare or bare.rstrip().endswith("?") or _REQUEST.match(bare) or _REACTION.match(bare):
        return False
    if _ADDRESSED.search(bare) or len(bare.split()) > MAX_WORDS + 8:
        return False
    words = _content(bare)
    own = _content(" ".join(own_words(message)))
    return bool(words) and len(words & own) / len(words) >= 0.5


def is_reaction(sentence: str) -> bool:
    """Whether a sentence reacts to an answer or asks for something rather than telling
    ("That sounds amazing, I love sunrise shots!", "I'm excited to see which one I like best")."""
    bare = _bare(sentence)
    return (not _FIRST_START.match(bare) or bare.endswith("!") or bool(_REACTION.match(bare))
            or bool(_REQUEST.match(bare)) or bool(_ADDRESSED.search(bare)))
