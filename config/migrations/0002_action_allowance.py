# The per-user action allowance, moved here from chat (chat.ChatAllowance): config's state takes
# the model over on the table chat made, then the table is renamed after its new app. Its rows
# stay, on a fresh database and an existing one alike.

import django.contrib.postgres.fields
import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("config", "0001_sign_in_attempts"),
        # After chat's state let the model go (unapplying chat's step first unapplies this one,
        # so the table has its old name again when chat takes the model back).
        ("chat", "0004_allowance_moves_to_config"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="ActionAllowance",
                    fields=[
                        (
                            "user",
                            models.OneToOneField(
                                on_delete=django.db.models.deletion.CASCADE,
                                primary_key=True,
                                related_name="+",
                                serialize=False,
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                        (
                            "recent_actions",
                            django.contrib.postgres.fields.ArrayField(
                                base_field=models.DateTimeField(), blank=True, default=list, size=None
                            ),
                        ),
                    ],
                    options={"db_table": "chat_chatallowance"},
                ),
            ],
            database_operations=[],
        ),
        migrations.AlterModelTable(name="actionallowance", table=None),
    ]
