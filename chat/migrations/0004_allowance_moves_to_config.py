# The per-user action allowance is not the chat's: it moved to config (config.ActionAllowance,
# config/migrations/0002_action_allowance.py). Only chat's state forgets it here; its table and
# rows stay, and config's migration takes them over.

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("chat", "0003_allowance"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="ChatAllowance")],
            database_operations=[],
        ),
    ]
