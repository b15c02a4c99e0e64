//! A rule regex anchored at both ends whose one capture group sits between
//! parts of fixed length (`^[Bb]earer (?<token>…)$`,
//! `^(?<cell_name>cell-[0-9]+)-[0-9a-f]{32}$`): every match is the whole
//! value and the group is the value less those lengths. Such a regex is
//! only asked whether it matches, which skips the capture bookkeeping and
//! the `Captures` allocation (about a quarter of a `captures` call
//! natively; every routable token and session cookie goes through one).

use regex_syntax::hir::{Hir, HirKind, Look};

/// The bytes before and after the capture group of every match of
/// `source`, or `None` when the regex is not of that shape (or invalid).
pub(crate) fn capture_frame(source: &str) -> Option<(u32, u32)> {
    let hir = regex_syntax::Parser::new().parse(source).ok()?;
    if hir.properties().explicit_captures_len() != 1 {
        return None;
    }
    let HirKind::Concat(parts) = hir.kind() else {
        return None;
    };
    // `^` and `$` of the whole value (`(?m)` would make them line anchors).
    let [first, middle @ .., last] = parts.as_slice() else {
        return None;
    };
    if !is_look(first, Look::Start) || !is_look(last, Look::End) {
        return None;
    }
    let group = middle
        .iter()
        .position(|p| matches!(p.kind(), HirKind::Capture(_)))?;
    let fixed = |parts: &[Hir]| -> Option<u32> {
        parts.iter().try_fold(0u32, |sum, p| {
            let props = p.properties();
            let len = props.minimum_len()?;
            (props.maximum_len() == Some(len)).then_some(())?;
            sum.checked_add(u32::try_from(len).ok()?)
        })
    };
    Some((fixed(&middle[..group])?, fixed(&middle[group + 1..])?))
}

fn is_look(hir: &Hir, look: Look) -> bool {
    matches!(hir.kind(), HirKind::Look(l) if *l == look)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn framed_regexes_have_their_fixed_parts_measured() {
        assert_eq!(
            capture_frame(r"^(?<token>[^\s.]+\.01\.[0-9a-z]{9})$"),
            Some((0, 0))
        );
        assert_eq!(
            capture_frame(r"^[Bb]earer (?<token>[^\s.]+\.01\.[0-9a-z]{9})$"),
            Some((7, 0))
        );
        assert_eq!(
            capture_frame(r"^(?<cell_name>cell-[0-9]+)-[0-9a-f]{32}$"),
            Some((0, 33))
        );
        // Lengths in bytes: é is two.
        assert_eq!(capture_frame(r"^é(?<x>a+)\.[ä]$"), Some((2, 3)));
        assert_eq!(capture_frame(r"^(?:ab|cd)(a+)$"), Some((2, 0)));
    }

    #[test]
    fn other_shapes_are_not_framed() {
        for source in [
            r"^/jwt/auth$",                      // no group
            r"^(?<a>x)(?<b>y)$",                 // two groups
            r"^(?<a>x)+$",                       // the group repeated
            r"^a*(?<g>x)$",                      // a part of varying length
            r"^(?<g>x)(?:/|$)",                  // not anchored at the end
            r"(?<g>x)$",                         // not anchored at the start
            r"(?m)^(?<g>x)$",                    // line anchors
            r"^(?<g>x)$|^y$",                    // an alternation
            r"^repository:(?<r>[a-z]+):[a-z]+$", // a varying suffix
            r"^(unclosed",                       // invalid
        ] {
            assert_eq!(capture_frame(source), None, "{source}");
        }
    }

    proptest::proptest! {
        /// Whether it matches, and the group, are as `captures` finds them.
        #[test]
        fn the_frame_gives_what_captures_gives(
            value in "([Bb]earer |cell-|[0-9a-f]{1,3}|-|\\.01\\.|[a-z0-9]{9}|é| |x){0,8}"
        ) {
            for source in [
                r"^[Bb]earer (?<token>[^\s.]+\.01\.[0-9a-z]{9})$",
                r"^(?<cell_name>cell-[0-9]+)-[0-9a-f]{3}-x$",
                r"^(?<all>[^ ]*)$",
                r"^é(?<x>[a-z]+)\.[0-9a-z]{9}$",
            ] {
                let (before, after) = capture_frame(source).unwrap();
                let re = regex::Regex::new(source).unwrap();
                let expected = re.captures(&value).map(|c| c.get(1).unwrap().range());
                let framed = re
                    .is_match(&value)
                    .then(|| before as usize..value.len() - after as usize);
                proptest::prop_assert_eq!(framed, expected, "{} {:?}", source, value);
            }
        }
    }
}
