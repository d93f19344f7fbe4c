from django.db import migrations, models

# Only passages whose words may name a period are read (the rest keep the empty list), in
# batches; memory.dates.mentioned_periods decides.
CANDIDATES = (
    r"(yesterday|tomorrow|\m(last|next|this)\s+\w|\mago\M|\min\s+\S+\s+(days?|weeks?|months?|years?)\M"
    r"|january|february|march|april|may|june|july|august|september|october|november|december)"
)


def backfill(apps, schema_editor):
    from memory.dates import mentioned_periods

    Passage = apps.get_model("memory", "Passage")
    rows = (
        Passage.objects.filter(kind="message", text__iregex=CANDIDATES)
        .only("id", "text", "timestamp")
        .order_by("id")
    )
    batch = []
    for passage in rows.iterator(chunk_size=2000):
        periods = mentioned_periods(passage.text, passage.timestamp)
        if periods:
            passage.periods = periods
            batch.append(passage)
        if len(batch) >= 500:
            Passage.objects.bulk_update(batch, ["periods"])
            batch = []
    if batch:
        Passage.objects.bulk_update(batch, ["periods"])


class Migration(migrations.Migration):

    dependencies = [
        ('memory', '0014_import_embed_order'),
    ]

    operations = [
        migrations.AddField(
            model_name='passage',
            name='periods',
            field=models.JSONField(blank=True, db_default=[], default=list),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop, elidable=True),
    ]
