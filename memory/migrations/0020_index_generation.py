import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

# What a turn's index reads beside its search and keeps between turns (memory.context.kept_reads)
# is valid while its owner's generation of that part stays the same. The generations are changed
# by triggers, in the transaction that writes, whatever writes (the ORM, a bulk update, raw SQL, a
# cascade): no write path can forget them. Values come from one sequence, so a value is never
# given twice (not after a rollback, not to another owner or part), and a transaction changes a
# part once per owner (a transaction-local setting remembers it did). A part's generation is the
# largest of its rows: each change appends a row (no two writers wait for each other).
BUMP = """
CREATE SEQUENCE memory_indexgeneration_seq;

CREATE FUNCTION memory_index_generation_bump(who integer, which text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    made bigint;
BEGIN
    IF current_setting('recollect.index_generation_' || which || '_' || who, true)
            IS DISTINCT FROM '1' THEN
        -- Appended, never updated: no other transaction's write waits for this one's commit.
        made := nextval('memory_indexgeneration_seq');
        INSERT INTO memory_indexgeneration (owner_id, part, generation) VALUES (who, which, made);
        -- The older rows of the part, but those another transaction holds (it drops them later).
        DELETE FROM memory_indexgeneration WHERE id IN (
            SELECT id FROM memory_indexgeneration
            WHERE owner_id = who AND part = which AND generation < made
            FOR UPDATE SKIP LOCKED);
        PERFORM set_config('recollect.index_generation_' || which || '_' || who, '1', true);
    END IF;
END $$;

-- Facts, topics and period summaries: once per statement and owner (a rebuild writes many rows).
CREATE FUNCTION memory_index_generation_rows() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM memory_index_generation_bump(o, TG_ARGV[0]) FROM (SELECT DISTINCT owner_id AS o FROM changed) d;
    RETURN NULL;
END $$;

-- Messages: once per row, only for a row that is or was pinned, or whose deleted flag changes
-- (the WHEN clauses below: every other write to a message costs one comparison).
CREATE FUNCTION memory_index_generation_message() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM memory_index_generation_bump(OLD.owner_id, 'pins');
        RETURN NULL;
    END IF;
    IF TG_OP = 'INSERT' OR OLD.pinned OR NEW.pinned THEN
        PERFORM memory_index_generation_bump(NEW.owner_id, 'pins');
    END IF;
    IF TG_OP = 'UPDATE' AND OLD.deleted IS DISTINCT FROM NEW.deleted THEN
        PERFORM memory_index_generation_bump(NEW.owner_id, 'facts');
    END IF;
    RETURN NULL;
END $$;
"""

TABLES = {"memory_fact": "facts", "memory_topic": "overview", "memory_periodsummary": "overview"}
ROW_TRIGGERS = "".join(
    f"""
CREATE TRIGGER {table}_index_generation_{op[0].lower()} AFTER {op} ON {table}
    REFERENCING {"OLD" if op == "DELETE" else "NEW"} TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION memory_index_generation_rows('{part}');
"""
    for table, part in TABLES.items()
    for op in ("INSERT", "UPDATE", "DELETE")
)
MESSAGE_TRIGGERS = """
CREATE TRIGGER memory_message_index_generation_i AFTER INSERT ON memory_message
    FOR EACH ROW WHEN (NEW.pinned) EXECUTE FUNCTION memory_index_generation_message();
CREATE TRIGGER memory_message_index_generation_u AFTER UPDATE ON memory_message
    FOR EACH ROW WHEN (OLD.pinned OR NEW.pinned OR OLD.deleted IS DISTINCT FROM NEW.deleted)
    EXECUTE FUNCTION memory_index_generation_message();
CREATE TRIGGER memory_message_index_generation_d AFTER DELETE ON memory_message
    FOR EACH ROW WHEN (OLD.pinned) EXECUTE FUNCTION memory_index_generation_message();
"""
# Owners with memory already: a generation each (an owner without a row is never kept for).
FIRST = """
INSERT INTO memory_indexgeneration (owner_id, part, generation)
SELECT u.id, p.part, nextval('memory_indexgeneration_seq')
FROM {users} u CROSS JOIN (VALUES ('facts'), ('pins'), ('overview')) p (part);
"""
DROP = (
    "".join(
        f"DROP TRIGGER IF EXISTS {table}_index_generation_{op} ON {table};"
        for table in (*TABLES, "memory_message")
        for op in "iud"
    )
    + "DROP FUNCTION IF EXISTS memory_index_generation_message();"
    "DROP FUNCTION IF EXISTS memory_index_generation_rows();"
    "DROP FUNCTION IF EXISTS memory_index_generation_bump(integer, text);"
    "DROP SEQUENCE IF EXISTS memory_indexgeneration_seq;"
)


def first_generations(apps, schema_editor):
    users = apps.get_model(*settings.AUTH_USER_MODEL.split("."))._meta.db_table
    schema_editor.execute(FIRST.format(users=schema_editor.quote_name(users)))


class Migration(migrations.Migration):

    dependencies = [
        ('auth', '0012_alter_user_first_name_max_length'),
        ('memory', '0019_reread_periods'),
    ]

    operations = [
        migrations.CreateModel(
            name='IndexGeneration',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('part', models.CharField(max_length=8)),
                ('generation', models.BigIntegerField()),
                ('owner', models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.DO_NOTHING, related_name='+', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'indexes': [models.Index(fields=['owner', 'part', 'generation'], name='indexgeneration_latest')],
            },
        ),
        migrations.RunSQL(BUMP + ROW_TRIGGERS + MESSAGE_TRIGGERS, DROP),
        migrations.RunPython(first_generations, migrations.RunPython.noop),
    ]
