# The alert channels a job may choose and an outbox row may be for are the registry's
# (jobs.alerts.channels), read by a callable: a channel added changes no migration. Choices
# live in Python only; the columns and their data are unchanged.

from django.db import migrations, models

import jobs.models


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0036_description_bound"),
    ]

    operations = [
        migrations.AlterField(
            model_name="alertdelivery",
            name="channel",
            field=models.CharField(choices=jobs.models.channel_choices, max_length=16),
        ),
        migrations.AlterField(
            model_name="job",
            name="alert_channels",
            field=models.CharField(
                choices=jobs.models.alert_channel_choices,
                default="default",
                help_text="Where this job's incidents are notified.",
                max_length=16,
            ),
        ),
    ]
