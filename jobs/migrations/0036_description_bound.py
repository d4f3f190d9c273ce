# A job's and a blackout window's description are bounded (jobs.text.MAX_DESCRIPTION) in the
# models' validation: the admin, the CLI and the API refuse a longer one. No SQL: a row longer
# already is kept as it is (the lists cut it), and refused only when edited.

import django.core.validators
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('jobs', '0035_distinct_names'),
    ]

    operations = [
        migrations.AlterField(
            model_name='blackout',
            name='description',
            field=models.TextField(blank=True, default='', help_text='Why.', validators=[django.core.validators.MaxLengthValidator(2000)]),
        ),
        migrations.AlterField(
            model_name='job',
            name='description',
            field=models.TextField(blank=True, default='', help_text='What this job is for.', validators=[django.core.validators.MaxLengthValidator(2000)]),
        ),
    ]
