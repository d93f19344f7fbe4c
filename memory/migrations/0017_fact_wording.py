
import memory.models.knowledge
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('memory', '0016_fact_current_rank'),
    ]

    operations = [
        migrations.AddField(
            model_name='fact',
            name='also_in',
            field=models.ManyToManyField(blank=True, related_name='repeated_facts', to='memory.message'),
        ),
        migrations.AddField(
            model_name='fact',
            name='kind',
            field=models.CharField(blank=True, default='', max_length=32),
        ),
        migrations.AddField(
            model_name='fact',
            name='wording',
            field=models.TextField(blank=True, default=''),
        ),
        migrations.AlterField(
            model_name='fact',
            name='message',
            field=models.ForeignKey(on_delete=memory.models.knowledge.cascade_and_redraw, related_name='facts', to='memory.message'),
        ),
        migrations.AddField(
            model_name='importjob',
            name='facts_learned',
            field=models.IntegerField(db_default=0, default=0),
        ),
        migrations.AddField(
            model_name='importjob',
            name='facts_read',
            field=models.IntegerField(db_default=0, default=0),
        ),
        migrations.AlterField(
            model_name='importjob',
            name='status',
            field=models.CharField(choices=[('storing', 'storing messages'), ('embedding', 'embedding'), ('topics', 'building topics'), ('facts', 'learning facts'), ('done', 'done'), ('failed', 'failed')], default='storing', max_length=16),
        ),
    ]
