# A run's own log (jobs.runlog): the lines its code logged or printed, numbered per run. The
# foreign key cascades in the database too, so whatever deletes runs (retention's batches, a
# job's removal, straight SQL) takes their lines, and a line of a deleted run is never kept.

import django.db.models.deletion
from django.db import migrations, models

from jobs.database.postgres_only import run_sql

CASCADE_IN_THE_DATABASE = """
ALTER TABLE jobs_runlogline ADD CONSTRAINT jobs_runlogline_run_cascade
    FOREIGN KEY (run_id) REFERENCES jobs_jobrun (id) ON DELETE CASCADE
"""


class Migration(migrations.Migration):

    dependencies = [
        ('jobs', '0040_queues_read_as_they_are'),
    ]

    operations = [
        migrations.CreateModel(
            name='RunLogLine',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('seq', models.BigIntegerField(help_text="The line's number in its run's log, from 1.")),
                ('at', models.DateTimeField(help_text="When it was logged, by the worker's clock.")),
                ('level', models.CharField(help_text='DEBUG to CRITICAL, or STDOUT / STDERR for what was printed.', max_length=16)),
                ('message', models.TextField()),
                ('run', models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='log_lines', to='jobs.jobrun')),
            ],
            options={
                'ordering': ['run', 'seq'],
                'constraints': [models.UniqueConstraint(fields=('run', 'seq'), name='one_log_line_per_seq')],
            },
        ),
        migrations.RunPython(run_sql(CASCADE_IN_THE_DATABASE), migrations.RunPython.noop),
    ]
