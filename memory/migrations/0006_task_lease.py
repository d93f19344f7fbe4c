import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_tasks_database", "0021_conditional_partial_index_ordering"),
        ("memory", "0005_passage_context"),
    ]

    operations = [
        migrations.CreateModel(
            name="TaskLease",
            fields=[
                (
                    "task",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="+",
                        serialize=False,
                        to="django_tasks_database.dbtaskresult",
                    ),
                ),
                ("expires_at", models.DateTimeField()),
            ],
        ),
        migrations.AddField(
            model_name="upkeeprun",
            name="task_id",
            field=models.UUIDField(blank=True, editable=False, null=True),
        ),
        migrations.AddIndex(
            model_name="upkeeprun",
            index=models.Index(fields=["task_id"], name="upkeep_task"),
        ),
    ]
