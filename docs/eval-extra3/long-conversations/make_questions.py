"""Writes the 30 temporal questions of this folder (issue 35, thirteenth round) and checks that
every expected turn exists in its dev history and that no question repeats a dev question.

    python docs/eval-extra3/long-conversations/make_questions.py [DEV_FOLDER]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).parent
DEV = Path(sys.argv[1] if len(sys.argv) > 1 else "/work/shared/eval/long-conversations")

Q = {
    "conv-26": [
        ("When did Caroline visit the beach?", ["D14:7"], "The week before 25 August 2023 (mid-August 2023)"),
        (
            "In which year did Melanie's family watch the Perseid meteor shower on a camping trip?",
            ["D10:14"],
            "2022",
        ),
        (
            "What year did Melanie get married?",
            ["D3:15", "D3:16"],
            "2018 (married five years as of June 2023)",
        ),
        (
            "About what year did Caroline start playing acoustic guitar?",
            ["D15:21"],
            "Around 2018 (about five years before August 2023)",
        ),
        (
            "What did Caroline go to on the Friday before June 27th?",
            ["D4:13"],
            "An LGBTQ+ counseling workshop (23 June 2023)",
        ),
        (
            "What did Melanie and her kids paint the weekend before 15 July 2023?",
            ["D8:6"],
            "A sunset with a palm tree",
        ),
        (
            "Did Melanie sign up for her pottery class before or after"
            " Caroline joined the mentorship program?",
            ["D5:4", "D9:2"],
            "Before: pottery on 2 July 2023, mentorship the weekend before 17 July 2023",
        ),
        (
            "Which month is Caroline's LGBTQ art show?",
            ["D9:12", "D14:33"],
            "Planned for August 2023 (said in July), then September 2023 (said on 25 August)",
        ),
        (
            "When did Melanie go camping in the forest with her kids?",
            ["D16:2"],
            "A few weeks before 13 September 2023 (August 2023)",
        ),
        (
            "What was Melanie up to the weekend of the 9th of September, 2023?",
            ["D16:16"],
            "A good time at a cafe with thoughtful signs",
        ),
    ],
    "conv-30": [
        ("When did a wholesaler agree to supply Gina's clothing store?", ["D3:2"], "1 February 2023"),
        ("In which year did Jon's dance crew win first place in a local competition?", ["D1:16"], "2022"),
        ("What month was Jon's nearby dance competition?", ["D4:13"], "March 2023"),
        (
            "When did Gina build her new website for orders?",
            ["D18:1"],
            "The week before 21 July 2023 (mid-July 2023)",
        ),
        (
            "Was Gina noticed by fashion editors before or after Jon's studio grand opening?",
            ["D15:5", "D17:1"],
            "After: the opening was 20 June 2023, the editors noticed her in early July 2023",
        ),
        (
            "How many days after Jon lost his banker job did a wholesaler say yes to Gina?",
            ["D1:2", "D3:2"],
            "13 days (19 January to 1 February 2023)",
        ),
        (
            "What was Jon busy with at the end of January 2023?",
            ["D2:4"],
            "Hunting for the ideal spot for his dance studio",
        ),
        (
            "What was happening at Jon's studio on June 20th?",
            ["D15:5", "D15:13"],
            "Its official opening night / grand opening",
        ),
    ],
    "conv-41": [
        ("In which year did Maria take a solo trip to Spain?", ["D13:24"], "2022"),
        ("When did Maria join a nearby church?", ["D14:10"], "5 May 2023"),
        (
            "When did John decide to run for office again?",
            ["D14:1"],
            "The week before 6 May 2023 (end of April 2023)",
        ),
        (
            "How long ago was the power cut in John's area?",
            ["D14:13"],
            "About three weeks (the week before 6 May 2023)",
            "2023-05-20T12:00:00Z",
        ),
        ("When did John visit a veteran's hospital?", ["D24:1"], "The week before 17 July 2023"),
        ("What did Maria do with her church friends the weekend before July 17th?", ["D24:6"], "A picnic"),
        (
            "When is Maria's ring-toss tournament for the shelter fundraiser?",
            ["D15:18", "D16:2"],
            "Late May / the week after 25 May 2023",
        ),
        (
            "When did John retake the aptitude test?",
            ["D8:18"],
            "The week before 6 March 2023 (end of February 2023)",
        ),
        (
            "What did Maria do at the shelter on Friday the 11th of August 2023?",
            ["D32:14"],
            "Volunteered at the front desk",
        ),
        (
            "How many weeks after Maria's grandmother died did John graduate?",
            ["D8:1", "D9:4"],
            "About four weeks (late February to late March 2023)",
        ),
        (
            "What happened to John on his way home in early January 2023?",
            ["D4:2"],
            "An unexpected incident: his car's windshield was broken",
        ),
        (
            "What did Maria do on the first Friday of February 2023?",
            ["D6:1"],
            "She challenged herself and did a charity event (3 February 2023)",
        ),
    ],
}
n = 0
for cid, qs in Q.items():
    history = (DEV / f"{cid}.history.jsonl").read_text().splitlines()
    ids = {json.loads(line)["external_id"] for line in history}
    dev_lines = (DEV / f"{cid}.queries.jsonl").read_text().splitlines()
    dev = {json.loads(line)["query"].strip().lower() for line in dev_lines}
    with open(HERE / f"{cid}.queries.jsonl", "w") as f:
        for q in qs:
            exp = [f"{cid}:{e}" for e in q[1]]
            missing = [e for e in exp if e not in ids]
            assert not missing, (q, missing)
            assert q[0].strip().lower() not in dev, q
            row = {"query": q[0], "expected": exp, "category": "temporal", "answer": q[2]}
            if len(q) > 3:
                row["question_date"] = q[3]
            f.write(json.dumps(row) + "\n")
            n += 1
print(n, "questions, every expected id exists, none repeats a dev question")
