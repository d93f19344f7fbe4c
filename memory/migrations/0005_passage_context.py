import django.contrib.postgres.indexes
import django.contrib.postgres.search
from django.db import migrations, models

# Existing passages get their context in SQL: the speaker an import recorded, and for a
# message's first passage the last ~300 characters of the live message it replies to. Their
# vectors stay as they were (own text only) until `manage.py reembed --all`.
BACKFILL = r"""
UPDATE memory_passage p SET context = concat_ws(E'\n',
    CASE WHEN p.index = 0 AND (u.is_chunk = false OR u.chunk_index = 0) AND par.id IS NOT NULL
         AND NOT par.deleted
         THEN right(par.content, 300) END,
    CASE WHEN m.metadata ? 'speaker' THEN (m.metadata->>'speaker') || ':' END)
FROM memory_message m
JOIN memory_message u ON true
LEFT JOIN memory_message par ON par.id = m.parent_id
WHERE p.kind = 'message' AND m.id = p.logical_message_id AND u.id = p.message_id
  AND (par.id IS NOT NULL OR m.metadata ? 'speaker')
"""


class Migration(migrations.Migration):

    dependencies = [
        ('memory', '0004_explorer_topic_messages'),
    ]

    operations = [
        migrations.AddField(
            model_name='passage',
            name='context',
            field=models.TextField(blank=True, db_default='', default=''),
        ),
        migrations.RemoveIndex(model_name='passage', name='passage_search_gin'),
        migrations.RemoveField(model_name='passage', name='search_vector'),
        migrations.RunSQL(BACKFILL, migrations.RunSQL.noop),
        migrations.AddField(
            model_name='passage',
            name='search_vector',
            field=models.GeneratedField(db_persist=True, expression=django.contrib.postgres.search.SearchVector('context', 'text', config='english'), output_field=django.contrib.postgres.search.SearchVectorField()),
        ),
        migrations.AddIndex(
            model_name='passage',
            index=django.contrib.postgres.indexes.GinIndex(fields=['search_vector'], name='passage_search_gin'),
        ),
    ]
