# Names printed and typed (jobs, blackout windows, API tokens) refuse a space at either end or a
# blank, in the models (jobs.names) and in the database: CHECK constraints hold those rules and
# the refusal of control characters (and, for jobs and windows, slashes) for rows written around
# the services too. A row that breaks them already is renamed first, not refused, as
# jobs.names.job_name_for would name it (frozen here): its data is kept, and a renamed job's beat
# entry and audit trail follow.

import json
import re

import django.core.validators
from django.db import migrations, models
from django.utils import timezone


_CONTROL_OR_SLASH = re.compile("[/\x00-\x1f\x7f-\x9f\u2028\u2029]")
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_SPACES_AT_AN_END = re.compile(
    "\\A[ \u00a0\u1680\u2000-\u200a\u202f\u205f\u3000]+"
    "|[ \u00a0\u1680\u2000-\u200a\u202f\u205f\u3000]+\\Z"
)


def _printable(name, max_length, *, slash):
    breaks = _CONTROL_OR_SLASH if slash else _CONTROL
    printable = breaks.sub(lambda m: "\u2215" if m.group() == "/" else " ", name)
    printable = _SPACES_AT_AN_END.sub(lambda m: "\u2420" * len(m.group()), printable)
    return (printable or "\u2420")[:max_length]


def _renamed(model, *, slash):
    """(row, old name) for each row renamed; a name taken already gets the row's id."""
    max_length = model._meta.get_field("name").max_length
    renamed = []
    for row in model.objects.order_by("pk"):
        name = _printable(row.name, max_length, slash=slash)
        if name == row.name:
            continue
        if model.objects.filter(name=name).exclude(pk=row.pk).exists():
            suffix = f"~{row.pk}"
            name = name[: max_length - len(suffix)] + suffix
        old, row.name = row.name, name
        row.save(update_fields=["name"])
        renamed.append((row, old))
    return renamed


def rename_unprintable_names(apps, schema_editor):
    Job = apps.get_model("jobs", "Job")
    AuditEntry = apps.get_model("jobs", "AuditEntry")
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    PeriodicTasks = apps.get_model("django_celery_beat", "PeriodicTasks")
    _renamed(apps.get_model("jobs", "Blackout"), slash=True)
    _renamed(apps.get_model("jobs", "ApiToken"), slash=False)
    jobs = _renamed(Job, slash=True)
    for job, old in jobs:
        AuditEntry.objects.create(
            actor="code:migration 0032", source="code", action="edit", job=job,
            job_name=job.name, before={"name": old}, after={"name": job.name},
        )  # fmt: skip
        if job.periodic_task_id is not None and not job.adopted:
            # The platform's own entry names its job (jobs.beat.entries): the beat runs it by name.
            PeriodicTask.objects.filter(pk=job.periodic_task_id).update(
                name=f"job:{job.name}", kwargs=json.dumps({"job": job.name})
            )
    if jobs:
        PeriodicTasks.objects.update_or_create(ident=1, defaults={"last_update": timezone.now()})


class Migration(migrations.Migration):

    dependencies = [
        ('django_celery_beat', '0019_alter_periodictasks_options'),
        ('jobs', '0031_take_lease_function'),
    ]

    operations = [
        migrations.RunPython(rename_unprintable_names, migrations.RunPython.noop),
        migrations.AlterField(
            model_name='apitoken',
            name='name',
            field=models.CharField(help_text='Who or what uses it.', max_length=100, unique=True, validators=[django.core.validators.RegexValidator('[\\x00-\\x1f\\x7f-\\x9f\\u2028\\u2029]', 'A token name cannot contain a line break or another control character.', code='control_character_in_name', inverse_match=True), django.core.validators.RegexValidator('\\A\\Z|\\A[ \\u00a0\\u1680\\u2000-\\u200a\\u202f\\u205f\\u3000]|[ \\u00a0\\u1680\\u2000-\\u200a\\u202f\\u205f\\u3000]\\Z', 'A token name cannot be blank or begin or end with a space.', code='padded_name', inverse_match=True)]),
        ),
        migrations.AlterField(
            model_name='blackout',
            name='name',
            field=models.CharField(help_text='Shown on every slot it skips, e.g. release-freeze.', max_length=100, unique=True, validators=[django.core.validators.RegexValidator('/', "A blackout window's name cannot contain '/': it is part of the API's URLs (/api/blackouts/<name>).", code='slash_in_name', inverse_match=True), django.core.validators.RegexValidator('[\\x00-\\x1f\\x7f-\\x9f\\u2028\\u2029]', "A blackout window's name cannot contain a line break or another control character.", code='control_character_in_name', inverse_match=True), django.core.validators.RegexValidator('\\A\\Z|\\A[ \\u00a0\\u1680\\u2000-\\u200a\\u202f\\u205f\\u3000]|[ \\u00a0\\u1680\\u2000-\\u200a\\u202f\\u205f\\u3000]\\Z', "A blackout window's name cannot be blank or begin or end with a space.", code='padded_name', inverse_match=True)]),
        ),
        migrations.AlterField(
            model_name='job',
            name='exchange',
            field=models.CharField(blank=True, default='', help_text="Celery exchange (blank: the queue's).", max_length=200, validators=[django.core.validators.RegexValidator('[\\x00-\\x1f\\x7f-\\x9f\\u2028\\u2029]', 'An exchange name cannot contain a line break or another control character.', code='control_character_in_name', inverse_match=True)]),
        ),
        migrations.AlterField(
            model_name='job',
            name='name',
            field=models.CharField(help_text='Unique name of this job, e.g. nightly-report.', max_length=190, unique=True, validators=[django.core.validators.RegexValidator('/', "A job name cannot contain '/': it is part of the API's URLs (/api/jobs/<name>).", code='slash_in_name', inverse_match=True), django.core.validators.RegexValidator('[\\x00-\\x1f\\x7f-\\x9f\\u2028\\u2029]', 'A job name cannot contain a line break or another control character.', code='control_character_in_name', inverse_match=True), django.core.validators.RegexValidator('\\A\\Z|\\A[ \\u00a0\\u1680\\u2000-\\u200a\\u202f\\u205f\\u3000]|[ \\u00a0\\u1680\\u2000-\\u200a\\u202f\\u205f\\u3000]\\Z', 'A job name cannot be blank or begin or end with a space.', code='padded_name', inverse_match=True)]),
        ),
        migrations.AlterField(
            model_name='job',
            name='queue',
            field=models.CharField(default='default', help_text='Celery queue.', max_length=100, validators=[django.core.validators.RegexValidator('[\\x00-\\x1f\\x7f-\\x9f\\u2028\\u2029]', 'A queue name cannot contain a line break or another control character.', code='control_character_in_name', inverse_match=True)]),
        ),
        migrations.AlterField(
            model_name='job',
            name='routing_key',
            field=models.CharField(blank=True, default='', help_text="Celery routing key (blank: the queue's).", max_length=200, validators=[django.core.validators.RegexValidator('[\\x00-\\x1f\\x7f-\\x9f\\u2028\\u2029]', 'A routing key cannot contain a line break or another control character.', code='control_character_in_name', inverse_match=True)]),
        ),
        migrations.AddConstraint(
            model_name='apitoken',
            constraint=models.CheckConstraint(condition=models.Q(models.Q(('name__regex', '[\\x00-\\x1f\\x7f-\\x9f\\u2028\\u2029]'), _negated=True), models.Q(('name__regex', '\\A\\Z|\\A[ \\u00a0\\u1680\\u2000-\\u200a\\u202f\\u205f\\u3000]|[ \\u00a0\\u1680\\u2000-\\u200a\\u202f\\u205f\\u3000]\\Z'), _negated=True)), name='token_name_printable'),
        ),
        migrations.AddConstraint(
            model_name='blackout',
            constraint=models.CheckConstraint(condition=models.Q(models.Q(('name__regex', '[\\x00-\\x1f\\x7f-\\x9f\\u2028\\u2029]'), _negated=True), models.Q(('name__regex', '\\A\\Z|\\A[ \\u00a0\\u1680\\u2000-\\u200a\\u202f\\u205f\\u3000]|[ \\u00a0\\u1680\\u2000-\\u200a\\u202f\\u205f\\u3000]\\Z'), _negated=True), models.Q(('name__contains', '/'), _negated=True)), name='blackout_name_printable'),
        ),
        migrations.AddConstraint(
            model_name='job',
            constraint=models.CheckConstraint(condition=models.Q(models.Q(('name__regex', '[\\x00-\\x1f\\x7f-\\x9f\\u2028\\u2029]'), _negated=True), models.Q(('name__regex', '\\A\\Z|\\A[ \\u00a0\\u1680\\u2000-\\u200a\\u202f\\u205f\\u3000]|[ \\u00a0\\u1680\\u2000-\\u200a\\u202f\\u205f\\u3000]\\Z'), _negated=True), models.Q(('name__contains', '/'), _negated=True)), name='job_name_printable'),
        ),
    ]
