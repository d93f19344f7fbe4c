import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

# What a turn's index reads beside its search and keeps between turns (memory.context.kept_reads)
# is valid while its owner's generation of that part stays the same. The generations are changed
# by triggers, in the transaction that writes, whatever writes (the ORM, a bulk update, raw SQL, a
# cascade): no write path can forget them. Values come from one sequence, so a value is never
# given twice (not after a rollback, not to another owner or part), and a transaction changes a
# part once per owner (a transaction-local setting remembers it did).
BUMP = """
CREATE SEQUENCE memory_indexgeneration_seq;

CREATE FUNCTION memory_index_generation_bump(owner integer, part text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('recollect.index_generation_' || part || '_' || owner, true)
            IS DISTINCT FROM '1' THEN
        -- A new row: every part new.
        INSERT INTO memory_indexgeneration (owner_id, facts, pins, overview)
        VALUES (owner, nextval('memory_indexgeneration_seq'), nextval('memory_indexgeneration_seq'),
                nextval('memory_indexgeneration_seq'))
        ON CONFLICT (owner_id) DO UPDATE SET
            facts = CASE WHEN part = 'facts' THEN EXCLUDED.facts ELSE memory_indexgeneration.facts END,
            pins = CASE WHEN part = 'pins' THEN EXCLUDED.pins ELSE memory_indexgeneration.pins END,
            overview = CASE WHEN part = 'overview' THEN EXCLUDED.overview
                       ELSE memory_indexgeneration.overview END;
        PERFORM set_config('recollect.index_generation_' || part || '_' || owner, '1', true);
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
INSERT INTO memory_indexgeneration (owner_id, facts, pins, overview)
SELECT id, nextval('memory_indexgeneration_seq'), nextval('memory_indexgeneration_seq'),
       nextval('memory_indexgeneration_seq')
FROM {users};
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
                ('owner', models.OneToOneField(db_constraint=False, on_delete=django.db.models.deletion.DO_NOTHING, primary_key=True, related_name='+', serialize=False, to=settings.AUTH_USER_MODEL)),
                ('facts', models.BigIntegerField()),
                ('pins', models.BigIntegerField()),
                ('overview', models.BigIntegerField()),
            ],
        ),
        migrations.RunSQL(BUMP + ROW_TRIGGERS + MESSAGE_TRIGGERS, DROP),
        migrations.RunPython(first_generations, migrations.RunPython.noop),
    ]
