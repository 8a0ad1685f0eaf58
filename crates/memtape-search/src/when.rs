//! Dates named in text, for time-aware ranking: absolute dates with a year ("on 7 July,
//! 2023", "in August 2023", "2023-05-08"; [`period`]), and dates read against a moment
//! ([`relative`]): relative ones ("yesterday", "last week", "three days ago", "last
//! Friday", "next month") and, optionally, dates without a year ("in May", "on June 3rd").
//! A message's relative dates are read against its own time (what "last week" meant when
//! it was said); a query's against the newest message it searches.

use chrono::{DateTime, Datelike, Days, Months, NaiveDate, Utc, Weekday};

/// A half-open span of time `[start, end)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Period {
    /// The first instant inside.
    pub start: DateTime<Utc>,
    /// The first instant after.
    pub end: DateTime<Utc>,
}

impl Period {
    /// Whether `at` falls inside.
    pub fn contains(&self, at: DateTime<Utc>) -> bool {
        self.start <= at && at < self.end
    }

    fn day(date: NaiveDate) -> Option<Period> {
        Period::span(date, date.checked_add_days(Days::new(1))?)
    }

    fn month(year: i32, month: u32) -> Option<Period> {
        let first = NaiveDate::from_ymd_opt(year, month, 1)?;
        Period::span(first, first.checked_add_months(Months::new(1))?)
    }

    fn year(year: i32) -> Option<Period> {
        Period::span(
            NaiveDate::from_ymd_opt(year, 1, 1)?,
            NaiveDate::from_ymd_opt(year + 1, 1, 1)?,
        )
    }

    fn span(start: NaiveDate, end: NaiveDate) -> Option<Period> {
        Some(Period {
            start: start.and_hms_opt(0, 0, 0)?.and_utc(),
            end: end.and_hms_opt(0, 0, 0)?.and_utc(),
        })
    }

    /// Whether the two share an instant.
    pub fn overlaps(&self, other: &Period) -> bool {
        self.start < other.end && other.start < self.end
    }

    /// The days `[from, to)`.
    fn days(from: NaiveDate, to: NaiveDate) -> Option<Period> {
        Period::span(from, to)
    }

    /// The smallest period covering both.
    fn union(self, other: Period) -> Period {
        Period {
            start: self.start.min(other.start),
            end: self.end.max(other.end),
        }
    }
}

const MONTHS: [&str; 12] = [
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
];

/// The month (1–12) a word names: a full name, or a three-letter abbreviation other than
/// "may"'s, which is the full name ("sept" is accepted too).
fn month_of(word: &str) -> Option<u32> {
    let word = word.to_lowercase();
    MONTHS
        .iter()
        .position(|m| {
            *m == word || (word.len() >= 3 && word.len() < m.len() && m.starts_with(&word))
        })
        .map(|i| i as u32 + 1)
}

/// A day of the month ("7", "07", "7th", "21st").
fn day_of(word: &str) -> Option<u32> {
    let digits = word.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let suffix = &word[digits.len()..];
    if !matches!(
        suffix.to_lowercase().as_str(),
        "" | "st" | "nd" | "rd" | "th"
    ) {
        return None;
    }
    let day: u32 = digits.parse().ok()?;
    (1..=31).contains(&day).then_some(day)
}

/// A four-digit year between 1900 and 2199.
fn year_of(word: &str) -> Option<i32> {
    if word.len() != 4 {
        return None;
    }
    let year: i32 = word.parse().ok()?;
    (1900..2200).contains(&year).then_some(year)
}

/// The period the dates in `text` name together, if it names any: each date with a year
/// ("7 July 2023", "July 7th, 2023", "2023-07-07", "July 2023", "2023") is a day, a month
/// or a year, and several dates give the span from the first to the last. A date without
/// a year before one with a year shares it ("between August 11 and August 15 2023"; the
/// year before when its month and day come later: "December 28 to January 3, 2024"); a
/// month without a day does not ("may" is as often a verb).
pub fn period(text: &str) -> Option<Period> {
    let words: Vec<&str> = text
        .split(|c: char| !c.is_alphanumeric() && c != '-')
        .flat_map(|w| {
            // An ISO date stays one word; other hyphenated words split.
            if iso_date(w).is_some() {
                vec![w]
            } else {
                w.split('-').collect()
            }
        })
        .filter(|w| !w.is_empty())
        .collect();
    let mut found: Option<Period> = None;
    let mut add = |p: Option<Period>| {
        if let Some(p) = p {
            found = Some(found.map_or(p, |f| f.union(p)));
        }
    };
    // Dates without a year waiting for the next one with a year, which they share ("between
    // August 11 and August 15 2023"): `(month, day)`.
    let mut pending: Vec<(u32, u32)> = Vec::new();
    let mut i = 0;
    while i < words.len() {
        let w = words[i];
        if let Some(date) = iso_date(w) {
            add(Period::day(date));
            i += 1;
        } else if let Some(month) = month_of(w) {
            // "July 7, 2023" / "July 7 2023" / "July 2023"
            let day = words.get(i + 1).and_then(|d| day_of(d));
            let year_at = if day.is_some() { i + 2 } else { i + 1 };
            // "7 July 2023": the day came before the month.
            let day = day.or_else(|| i.checked_sub(1).and_then(|j| day_of(words[j])));
            let date = |year: i32, month: u32, day: Option<u32>| match day {
                Some(d) => NaiveDate::from_ymd_opt(year, month, d).and_then(Period::day),
                None => Period::month(year, month),
            };
            match words.get(year_at).and_then(|y| year_of(y)) {
                Some(year) => {
                    for (m, d) in pending.drain(..) {
                        // "between December 28 and January 3 2024": the year before.
                        let later = (m, d) > (month, day.unwrap_or(31));
                        add(date(if later { year - 1 } else { year }, m, Some(d)));
                    }
                    add(date(year, month, day));
                    i = year_at + 1;
                }
                None => {
                    // Only with a day: a bare "may" is as often a verb as a month.
                    if let Some(day) = day {
                        pending.push((month, day));
                    }
                    i += 1;
                }
            }
        } else if let Some(year) = year_of(w) {
            add(Period::year(year));
            i += 1;
        } else {
            i += 1;
        }
    }
    found
}

/// A small count written as digits or a word ("3", "three", "a", "a few", "a couple").
fn count_of(words: &[&str], at: usize) -> Option<(u32, usize)> {
    let w = words.get(at)?.to_lowercase();
    let next = words.get(at + 1).map(|n| n.to_lowercase());
    let next = next.as_deref();
    let n = match w.as_str() {
        "a" | "an" => match next {
            Some("few") => return Some((3, 2)),
            Some("couple") => {
                let skip = if words
                    .get(at + 2)
                    .is_some_and(|o| o.eq_ignore_ascii_case("of"))
                {
                    3
                } else {
                    2
                };
                return Some((2, skip));
            }
            _ => 1,
        },
        "one" => 1,
        "two" | "couple" => 2,
        "three" | "few" => 3,
        "four" => 4,
        "five" => 5,
        "six" => 6,
        "seven" => 7,
        "eight" => 8,
        "nine" => 9,
        "ten" => 10,
        digits => digits.parse().ok().filter(|n| (1..=400).contains(n))?,
    };
    Some((n, 1))
}

/// The weekday a word names ("friday", "fri").
fn weekday_of(word: &str) -> Option<Weekday> {
    let word = word.to_lowercase();
    [
        ("monday", Weekday::Mon),
        ("tuesday", Weekday::Tue),
        ("wednesday", Weekday::Wed),
        ("thursday", Weekday::Thu),
        ("friday", Weekday::Fri),
        ("saturday", Weekday::Sat),
        ("sunday", Weekday::Sun),
    ]
    .into_iter()
    .find(|(name, _)| *name == word)
    .map(|(_, d)| d)
}

/// The Monday of `day`'s week.
fn monday_of(day: NaiveDate) -> Option<NaiveDate> {
    day.checked_sub_days(Days::new(u64::from(day.weekday().num_days_from_monday())))
}

/// The calendar month `months` before (negative: after) `day`'s month.
fn month_from(day: NaiveDate, months: i32) -> Option<Period> {
    let first = NaiveDate::from_ymd_opt(day.year(), day.month(), 1)?;
    let first = if months >= 0 {
        first.checked_sub_months(Months::new(months.unsigned_abs()))?
    } else {
        first.checked_add_months(Months::new(months.unsigned_abs()))?
    };
    Period::month(first.year(), first.month())
}

/// The period the dates in `text` name when read at `now`: relative dates ("yesterday",
/// "the day before yesterday", "last night", "last week", "last weekend", "last month",
/// "last year", "last Friday", "N days / weeks / months / years ago", "tomorrow", "next
/// week / month / year / Friday", "on the 15th": the latest 15th at or before `now`) and,
/// with `yearless`, dates without a year ("in May", "on May 3rd", "3 June": the latest at
/// or before `now`); several give the span from the first to the last. `None` when there
/// are none.
///
/// Weeks run Monday to Sunday; "N weeks ago" is the seven days around that day, "N
/// months ago" and "N years ago" the calendar month and year.
pub fn relative(text: &str, now: DateTime<Utc>, yearless: bool) -> Option<Period> {
    let today = now.date_naive();
    let words: Vec<&str> = text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect();
    let lower: Vec<String> = words.iter().map(|w| w.to_lowercase()).collect();
    let word = |i: usize| lower.get(i).map_or("", String::as_str);
    let back = |days: u64| today.checked_sub_days(Days::new(days));
    let ahead = |days: u64| today.checked_add_days(Days::new(days));
    let mut found: Option<Period> = None;
    let mut add = |p: Option<Period>| {
        if let Some(p) = p {
            found = Some(found.map_or(p, |f| f.union(p)));
        }
    };
    let mut i = 0;
    while i < lower.len() {
        let w = word(i);
        let mut step = 1;
        match w {
            "yesterday" => {
                // "the day before yesterday"
                let before = i >= 2 && word(i - 2) == "day" && word(i - 1) == "before";
                add(back(if before { 2 } else { 1 }).and_then(Period::day));
            }
            "tomorrow" => add(ahead(1).and_then(Period::day)),
            // "on the 15th": the latest 15th at or before today (not "on the 15th of May",
            // which names its month).
            "on" if word(i + 1) == "the"
                && word(i + 3) != "of"
                && word(i + 2).ends_with(|c: char| c.is_ascii_alphabetic())
                && day_of(word(i + 2)).is_some() =>
            {
                step = 3;
                add(day_of(word(i + 2)).and_then(|d| {
                    let this_month = today.with_day(d).filter(|day| *day <= today);
                    let date = this_month.or_else(|| {
                        let last = today.with_day(1)?.checked_sub_months(Months::new(1))?;
                        last.with_day(d)
                    })?;
                    Period::day(date)
                }));
            }
            "last" | "past" | "next" | "this" => {
                let sign: i64 = match w {
                    "next" => -1,
                    "this" => 0,
                    _ => 1,
                };
                step = 2;
                match word(i + 1) {
                    "night" if sign == 1 => add(back(1).and_then(Period::day)),
                    "week" => add(monday_of(today).and_then(|m| {
                        let from = m.checked_sub_signed(chrono::TimeDelta::days(7 * sign))?;
                        Period::days(from, from.checked_add_days(Days::new(7))?)
                    })),
                    "weekend" => add(monday_of(today).and_then(|m| {
                        let saturday =
                            m.checked_add_signed(chrono::TimeDelta::days(5 - 7 * sign))?;
                        Period::days(saturday, saturday.checked_add_days(Days::new(2))?)
                    })),
                    "month" => add(month_from(today, sign as i32)),
                    "year" => add(Period::year(today.year() - sign as i32)),
                    other => match weekday_of(other) {
                        Some(day) if sign != 0 => {
                            // The latest such weekday before today (or the first after).
                            let gap = if sign == 1 {
                                (7 + today.weekday().num_days_from_monday()
                                    - day.num_days_from_monday())
                                    % 7
                            } else {
                                (7 + day.num_days_from_monday()
                                    - today.weekday().num_days_from_monday())
                                    % 7
                            };
                            let gap = u64::from(if gap == 0 { 7 } else { gap });
                            add(if sign == 1 { back(gap) } else { ahead(gap) }
                                .and_then(Period::day));
                        }
                        _ => step = 1,
                    },
                }
            }
            _ => {
                if let Some((n, used)) = count_of(&words, i)
                    && word(i + used + 1) == "ago"
                {
                    let n = i64::from(n);
                    let unit = word(i + used);
                    step = used + 2;
                    add(match unit.trim_end_matches('s') {
                        "day" => back(n as u64).and_then(Period::day),
                        "week" => today
                            .checked_sub_signed(chrono::TimeDelta::days(7 * n + 3))
                            .and_then(|from| {
                                Period::days(from, from.checked_add_days(Days::new(7))?)
                            }),
                        "month" => month_from(today, n as i32),
                        "year" => Period::year(today.year() - n as i32),
                        _ => None,
                    });
                } else if yearless && let Some(month) = month_of(w) {
                    // A month without a year, after a preposition or beside a day, so
                    // that "may" and "march" as words are not read as months.
                    let day_after = lower.get(i + 1).and_then(|d| day_of(d));
                    let day_before = i.checked_sub(1).and_then(|j| day_of(word(j)));
                    let day = day_after.or(day_before);
                    let year_follows = lower
                        .get(i + 1 + usize::from(day_after.is_some()))
                        .is_some_and(|y| year_of(y).is_some());
                    let after_preposition = i > 0
                        && matches!(
                            word(i - 1),
                            "in" | "on"
                                | "of"
                                | "during"
                                | "since"
                                | "until"
                                | "before"
                                | "after"
                                | "by"
                        );
                    if !year_follows && (day.is_some() || after_preposition) {
                        // The latest such day or month at or before today.
                        let year = if (month, day.unwrap_or(1)) <= (today.month(), today.day()) {
                            today.year()
                        } else {
                            today.year() - 1
                        };
                        add(match day {
                            Some(d) => {
                                NaiveDate::from_ymd_opt(year, month, d).and_then(Period::day)
                            }
                            None => Period::month(year, month),
                        });
                        if day_after.is_some() {
                            step = 2;
                        }
                    }
                }
            }
        }
        i += step;
    }
    found
}

/// A `YYYY-MM-DD` date.
fn iso_date(word: &str) -> Option<NaiveDate> {
    if word.len() != 10 {
        return None;
    }
    NaiveDate::parse_from_str(word, "%Y-%m-%d").ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn days(text: &str) -> Option<(String, String)> {
        period(text).map(|p| {
            (
                p.start.format("%Y-%m-%d").to_string(),
                p.end.format("%Y-%m-%d").to_string(),
            )
        })
    }

    fn span(a: &str, b: &str) -> Option<(String, String)> {
        Some((a.to_string(), b.to_string()))
    }

    #[test]
    fn a_day_in_any_common_order() {
        for text in [
            "What did Maria plan on 7 July, 2023?",
            "What did Maria plan on July 7, 2023?",
            "what happened on july 7th 2023",
            "notes from 2023-07-07",
            "on 7 Jul 2023",
        ] {
            assert_eq!(days(text), span("2023-07-07", "2023-07-08"), "{text}");
        }
    }

    #[test]
    fn a_month_or_a_year() {
        assert_eq!(
            days("What is John doing as a volunteer in August 2023?"),
            span("2023-08-01", "2023-09-01")
        );
        assert_eq!(
            days("Which performances did John achieve in 2023?"),
            span("2023-01-01", "2024-01-01")
        );
        assert_eq!(
            days("What happened in December 2023"),
            span("2023-12-01", "2024-01-01")
        );
    }

    #[test]
    fn several_dates_span_from_first_to_last() {
        assert_eq!(
            days("Where was John between August 11 and August 15 2023?"),
            span("2023-08-11", "2023-08-16"),
            "a date without a year shares the next one's"
        );
        assert_eq!(
            days("between December 28 and January 3, 2024"),
            span("2023-12-28", "2024-01-04")
        );
        assert_eq!(
            days("from May 3 to July 7th 2023"),
            span("2023-05-03", "2023-07-08")
        );
        assert_eq!(
            days("I may go on July 7th 2023"),
            span("2023-07-07", "2023-07-08"),
            "a month without a day waits for no year"
        );
        assert_eq!(
            days("on August 11 and then in 2023"),
            span("2023-01-01", "2024-01-01"),
            "a bare year is not a date's year"
        );
        assert_eq!(days("between August 11 and August 15"), None);
        assert_eq!(
            days("from 3 June 2023 to 9 June 2023"),
            span("2023-06-03", "2023-06-10")
        );
    }

    #[test]
    fn no_year_or_no_date_names_no_period() {
        for text in [
            "When did Melanie go camping in June?",
            "What did I say last week?",
            "May I ask what you did?",
            "I'm not sure",
            "the 31 flavours",
            "31 February 2023",
        ] {
            assert_eq!(period(text), None, "{text}");
        }
    }
    /// `relative` read at Wednesday 12 July 2023, 15:00.
    fn at_july_12(text: &str, yearless: bool) -> Option<(String, String)> {
        let now = NaiveDate::from_ymd_opt(2023, 7, 12)
            .and_then(|d| d.and_hms_opt(15, 0, 0))
            .map(|t| t.and_utc());
        relative(text, now.expect("a date"), yearless).map(|p| {
            (
                p.start.format("%Y-%m-%d").to_string(),
                p.end.format("%Y-%m-%d").to_string(),
            )
        })
    }

    #[test]
    fn relative_dates_are_read_against_the_moment() {
        for (text, want) in [
            (
                "I went to a support group yesterday",
                span("2023-07-11", "2023-07-12"),
            ),
            (
                "the day before yesterday we met",
                span("2023-07-10", "2023-07-11"),
            ),
            ("last night was fun", span("2023-07-11", "2023-07-12")),
            (
                "Last week I went to a pride parade",
                span("2023-07-03", "2023-07-10"),
            ),
            (
                "last weekend we went camping",
                span("2023-07-08", "2023-07-10"),
            ),
            (
                "this weekend we go camping",
                span("2023-07-15", "2023-07-17"),
            ),
            ("next week is the game", span("2023-07-17", "2023-07-24")),
            ("last month", span("2023-06-01", "2023-07-01")),
            (
                "next month I'm in Seattle",
                span("2023-08-01", "2023-09-01"),
            ),
            (
                "last year we went camping",
                span("2022-01-01", "2023-01-01"),
            ),
            ("last Friday", span("2023-07-07", "2023-07-08")),
            ("last Wednesday", span("2023-07-05", "2023-07-06")),
            ("next Monday", span("2023-07-17", "2023-07-18")),
            ("tomorrow", span("2023-07-13", "2023-07-14")),
            ("three days ago", span("2023-07-09", "2023-07-10")),
            ("2 weeks ago", span("2023-06-25", "2023-07-02")),
            ("a few months ago", span("2023-04-01", "2023-05-01")),
            ("a couple of years ago", span("2021-01-01", "2022-01-01")),
            ("I moved here 4 years ago", span("2019-01-01", "2020-01-01")),
            (
                "I met my teammates on the 10th after my trip",
                span("2023-07-10", "2023-07-11"),
            ),
            (
                "the game on the 20th was wild",
                span("2023-06-20", "2023-06-21"),
            ),
        ] {
            assert_eq!(at_july_12(text, false), want, "{text}");
        }
        for text in [
            "on the 3 of them",
            "on the 15th of May",
            "on the 31st",
            "the 10th time",
        ] {
            assert_eq!(
                at_july_12(text, false),
                None,
                "{text}: no day alone, the month's own, June has no 31st, no \"on\""
            );
        }
    }

    #[test]
    fn relative_dates_at_the_edges_of_time_name_nothing_or_something_without_panicking() {
        for text in [
            "yesterday and tomorrow",
            "last week, next weekend, this month, last year",
            "last Friday, next Monday",
            "400 years ago, 400 months ago, 400 weeks ago, 400 days ago",
            "in December, on 31 January, in May",
            "on the 15th, on the 31st",
        ] {
            for at in [DateTime::<Utc>::MIN_UTC, DateTime::<Utc>::MAX_UTC] {
                let _ = relative(text, at, true);
            }
        }
    }

    #[test]
    fn dates_without_a_year_are_the_latest_before_the_moment_when_asked_for() {
        for (text, want) in [
            (
                "When did Melanie go camping in June?",
                span("2023-06-01", "2023-07-01"),
            ),
            (
                "Which spot did Joanna visit in August?",
                span("2022-08-01", "2022-09-01"),
            ),
            (
                "what happened on July 4th",
                span("2023-07-04", "2023-07-05"),
            ),
            ("on 20 December", span("2022-12-20", "2022-12-21")),
        ] {
            assert_eq!(at_july_12(text, true), want, "{text}");
            assert_eq!(at_july_12(text, false), None, "{text}: not asked for");
        }
        for text in [
            "May I ask what you did?",
            "we march on",
            "the past",
            "last but not least",
            "in 7 July 2023",
            "ten ago",
            "9999 days ago",
        ] {
            assert_eq!(at_july_12(text, true), None, "{text}");
        }
    }
}
