from django.db import migrations

# The periods a message names are read by a grammar now ("last Fri", "two weekends ago", "over
# the weekend", "in March" by the sentence's tense, "back in 2013"): the stored ones are read
# again once, as `manage.py reread_periods` does. Only passages whose words may name a period are
# read (the rest keep what they hold: a reading of theirs names none, before and now).
CANDIDATES = (
    r"(yesterday|tomorrow|tonight|\mnight\M|weekend|other day|\m(last|next|this|earlier|later)\s+\w"
    r"|\mago\M|from\s+(now|today)|\min\s+\S+\s+(days?|weeks?|months?|years?)\M|\d{4}"
    r"|monday|tuesday|wednesday|thursday|friday|saturday|sunday"
    r"|january|february|march|april|may|june|july|august|september|october|november|december)"
)


def reread(apps, schema_editor):
    from memory.management.commands.reread_periods import reread as reread_passages

    Passage = apps.get_model("memory", "Passage")
    reread_passages(Passage.objects.filter(kind="message", deleted=False, text__iregex=CANDIDATES))


class Migration(migrations.Migration):

    dependencies = [
        ("memory", "0018_conversation_controls"),
    ]

    operations = [
        migrations.RunPython(reread, migrations.RunPython.noop, elidable=True),
    ]
