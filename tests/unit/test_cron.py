"""The source model's cron check (no Celery) and Celery's crontab (what beat runs) agree on what is valid."""

from __future__ import annotations

import pytest
from celery.schedules import crontab

from headwater.cron import check_cron

VALID = ["* * * * *", "0 3 * * *", "*/15 * * * *", "0 9-17 * * mon-fri", "30 4 1,15 * *", "0 0 * jan,jul sun",
         "5 0 * 8 *", "0 22 * * 1-5", "0 */2 * * *", "15 14 1 * *", "0 0 29 2 *", "0 12 * * 6"]
INVALID = ["* * * *", "* * * * * *", "every tuesday", "60 * * * *", "* 24 * * *", "* * 0 * *", "* * * 13 *",
           "* * * * 7", "*/0 * * * *", "a b c d e", "0 3 * * funday", "1-2-3 * * * *"]


@pytest.mark.parametrize("line", VALID)
def test_a_valid_line_is_valid_for_both(line):
    check_cron(line)
    minute, hour, day, month, weekday = line.split()
    cron = crontab(minute=minute, hour=hour, day_of_month=day, month_of_year=month, day_of_week=weekday)
    assert cron.remaining_estimate(cron.now()).total_seconds() >= 0


@pytest.mark.parametrize("line", INVALID)
def test_an_invalid_line_is_refused_with_what_is_wrong(line):
    with pytest.raises(ValueError, match="cron schedule"):
        check_cron(line)
