# Who paused a job, why and until when (jobs.services.set_enabled), and an index for the beats
# that look, every tick, for pauses whose end passed (jobs.beat.pause_ends). Jobs paused before
# keep their pause with no reason and no end.

import django.core.validators
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('django_celery_beat', '0019_alter_periodictasks_options'),
        ('jobs', '0037_channel_choices_from_registry'),
    ]

    operations = [
        migrations.AddField(
            model_name='job',
            name='pause_reason',
            field=models.CharField(blank=True, db_default='', default='', help_text='Why it is paused.', max_length=300, validators=[django.core.validators.RegexValidator('[\\x00-\\x1f\\x7f-\\x9f\\u2028\\u2029]', 'A pause reason cannot contain a line break or another control character.', code='control_character_in_name', inverse_match=True)]),
        ),
        migrations.AddField(
            model_name='job',
            name='paused_by',
            field=models.CharField(blank=True, db_default='', default='', editable=False, help_text='Who paused it (as the audit trail names actors).', max_length=200),
        ),
        migrations.AddField(
            model_name='job',
            name='paused_until',
            field=models.DateTimeField(blank=True, help_text='When it resumes by itself (empty: when resumed).', null=True),
        ),
        migrations.AddIndex(
            model_name='job',
            index=models.Index(condition=models.Q(('paused_until__isnull', False)), fields=['paused_until'], name='job_paused_until'),
        ),
    ]
