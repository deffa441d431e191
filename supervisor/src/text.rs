//! Free text that children and a directing child hand the supervisor (a `STATUS=`, the reason
//! of a kill, output lines kept for error reports), made fit to keep and to pass on when it is
//! received: one line of printable characters, cut to a bounded length. Bounded text keeps
//! every process table within what the link to a directing child carries
//! ([`crate::remote`]); a line without control characters cannot inject another assignment
//! into an sd_notify message sent upward, nor escape into six bytes of JSON apiece.

/// The longest status text kept: a `STATUS=`, the reason of a kill, a status sent upward.
pub const MAX_STATUS: usize = 512;

/// What a control character other than a tab becomes.
const REPLACEMENT: char = char::REPLACEMENT_CHARACTER;

/// `text` as one line of printable characters, at most `max` bytes long: a tab becomes a
/// space, every other control character (newlines included) U+FFFD, and the result is cut on
/// a character boundary. Its JSON form is at most `2 × max + 2` bytes (only `"` and `\` are
/// escaped, to two bytes each).
pub fn one_line(text: &str, max: usize) -> String {
    let mut line = String::with_capacity(text.len().min(max));
    for c in text.chars() {
        let c = match c {
            '\t' => ' ',
            c if c.is_control() => REPLACEMENT,
            c => c,
        };
        if line.len() + c.len_utf8() > max {
            break;
        }
        line.push(c);
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(rows: &[(&str, usize, &str)]) {
        for &(text, max, expected) in rows {
            let line = one_line(text, max);
            assert_eq!(line, expected, "one_line({text:?}, {max})");
            assert!(line.len() <= max);
            let json = serde_json::to_string(&line).expect("serialises");
            assert!(json.len() <= 2 * max + 2, "{json}");
        }
    }

    #[test]
    fn control_characters_are_replaced_and_the_length_bounded() {
        check(&[
            ("ready", 512, "ready"),
            ("a\tb", 512, "a b"),
            ("up\nREADY=1", 512, "up\u{fffd}READY=1"),
            ("\r\x1b[2J\x7f", 512, "\u{fffd}\u{fffd}[2J\u{fffd}"),
            ("\u{85}next line", 512, "\u{fffd}next line"),
            ("abcdef", 3, "abc"),
            // Never half a character: "é" is two bytes.
            ("aé", 2, "a"),
            // A replacement is three bytes: two fit in seven, not a third.
            ("\x01\x02\x03", 7, "\u{fffd}\u{fffd}"),
            ("\"\\\"\\", 4, "\"\\\"\\"),
            ("", 0, ""),
        ]);
        let hostile: String = (1u8..0x20).map(char::from).cycle().take(4080).collect();
        let line = one_line(&hostile, MAX_STATUS);
        assert!(line.len() <= MAX_STATUS && line.len() > MAX_STATUS - REPLACEMENT.len_utf8());
        assert!(!line.chars().any(char::is_control));
    }
}
