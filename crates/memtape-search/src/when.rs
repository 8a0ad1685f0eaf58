//! Dates named in a query ("on 7 July, 2023", "in August 2023", "2023-05-08"): the period
//! they name, for time-aware ranking. Only absolute dates with a year are read; a date
//! without a year, or a relative one ("last week"), names no period.

use chrono::{DateTime, Days, Months, NaiveDate, Utc};

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
/// or a year, and several dates give the span from the first to the last.
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
            match words.get(year_at).and_then(|y| year_of(y)) {
                Some(year) => {
                    add(match day {
                        Some(d) => NaiveDate::from_ymd_opt(year, month, d).and_then(Period::day),
                        None => Period::month(year, month),
                    });
                    i = year_at + 1;
                }
                None => i += 1,
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
            span("2023-08-15", "2023-08-16"),
            "a date without its own year is not read"
        );
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
}
