//! Frame Streams, the framing kresd's dnstap module writes through libfstrm's unix writer:
//! both sides of the bidirectional handshake (READY → ACCEPT, START; at the end STOP →
//! FINISH) and the frames themselves, for the tests and benchmarks that play the operator's
//! own dnstap collector (`logging.dnstap` goes from kresd straight to it). Written here
//! because no maintained crate reads the bidirectional form; it is small: a frame is a 32-bit
//! big-endian length and that many bytes, a length of zero escapes a control frame (its own
//! length, then a type and fields).
//!
//! Everything that comes in is bounded: a control frame at most [`CONTROL_MAX`] bytes (as
//! libfstrm's own limit), a data frame at most [`DATA_MAX`].

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The content type kresd's dnstap module offers.
pub const CONTENT_TYPE: &[u8] = b"protobuf:dnstap.Dnstap";
/// The longest control frame read (libfstrm's `FSTRM_CONTROL_FRAME_LENGTH_MAX`).
pub const CONTROL_MAX: u32 = 512;
/// The longest data frame read: a DNS message of 64 KiB twice (query and answer) and the
/// dnstap fields around them.
pub const DATA_MAX: u32 = 160 * 1024;

/// The control frame types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlKind {
    Accept,
    Start,
    Stop,
    Ready,
    Finish,
}

impl ControlKind {
    fn code(self) -> u32 {
        match self {
            ControlKind::Accept => 1,
            ControlKind::Start => 2,
            ControlKind::Stop => 3,
            ControlKind::Ready => 4,
            ControlKind::Finish => 5,
        }
    }

    fn of(code: u32) -> Option<ControlKind> {
        Some(match code {
            1 => ControlKind::Accept,
            2 => ControlKind::Start,
            3 => ControlKind::Stop,
            4 => ControlKind::Ready,
            5 => ControlKind::Finish,
            _ => return None,
        })
    }
}

/// The one control field type: a content type.
const FIELD_CONTENT_TYPE: u32 = 1;

/// A control frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Control {
    /// Its type.
    pub kind: ControlKind,
    /// The content types it names.
    pub content_types: Vec<Vec<u8>>,
}

/// One frame of the stream.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame {
    /// A data frame: one dnstap message.
    Data(Vec<u8>),
    /// A control frame.
    Control(Control),
}

/// Why a stream is given up.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("reading or writing the stream: {0}")]
    Io(#[from] std::io::Error),
    #[error("a data frame of {0} bytes (at most {DATA_MAX})")]
    DataTooLong(u32),
    #[error("a control frame of {0} bytes (at most {CONTROL_MAX})")]
    ControlTooLong(u32),
    #[error("a malformed control frame")]
    MalformedControl,
    #[error("a {got:?} control frame where {expected:?} was due")]
    Unexpected {
        expected: ControlKind,
        got: ControlKind,
    },
    #[error("a data frame before the stream started")]
    DataBeforeStart,
    #[error("the writer does not offer {}", String::from_utf8_lossy(CONTENT_TYPE))]
    ContentType,
}

/// A control frame's payload (type and fields) read; unknown field types are skipped.
pub fn parse_control(payload: &[u8]) -> Result<Control, FrameError> {
    let mut words = payload;
    let code = take_u32(&mut words).ok_or(FrameError::MalformedControl)?;
    let kind = ControlKind::of(code).ok_or(FrameError::MalformedControl)?;
    let mut content_types = Vec::new();
    while !words.is_empty() {
        let field = take_u32(&mut words).ok_or(FrameError::MalformedControl)?;
        let len = take_u32(&mut words).ok_or(FrameError::MalformedControl)? as usize;
        if len > words.len() {
            return Err(FrameError::MalformedControl);
        }
        let (value, rest) = words.split_at(len);
        if field == FIELD_CONTENT_TYPE {
            content_types.push(value.to_vec());
        }
        words = rest;
    }
    Ok(Control {
        kind,
        content_types,
    })
}

/// A control frame as sent: the escape, its length, its type, its content types.
pub fn encode_control(kind: ControlKind, content_types: &[&[u8]]) -> Vec<u8> {
    let mut payload = kind.code().to_be_bytes().to_vec();
    for ct in content_types {
        payload.extend_from_slice(&FIELD_CONTENT_TYPE.to_be_bytes());
        payload.extend_from_slice(&(ct.len() as u32).to_be_bytes());
        payload.extend_from_slice(ct);
    }
    let mut frame = 0u32.to_be_bytes().to_vec();
    frame.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    frame.extend_from_slice(&payload);
    frame
}

/// A data frame as sent.
pub fn encode_data(payload: &[u8]) -> Vec<u8> {
    let mut frame = (payload.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(payload);
    frame
}

fn take_u32(words: &mut &[u8]) -> Option<u32> {
    let (head, rest) = words.split_first_chunk::<4>()?;
    *words = rest;
    Some(u32::from_be_bytes(*head))
}

/// The next frame; `None` when the stream ends cleanly between frames.
pub async fn read_frame<R: AsyncRead + Unpin>(reader: &mut R) -> Result<Option<Frame>, FrameError> {
    let mut len = [0u8; 4];
    match reader.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let len = u32::from_be_bytes(len);
    if len == 0 {
        let mut clen = [0u8; 4];
        reader.read_exact(&mut clen).await?;
        let clen = u32::from_be_bytes(clen);
        if clen > CONTROL_MAX {
            return Err(FrameError::ControlTooLong(clen));
        }
        let mut payload = vec![0u8; clen as usize];
        reader.read_exact(&mut payload).await?;
        return parse_control(&payload).map(|c| Some(Frame::Control(c)));
    }
    if len > DATA_MAX {
        return Err(FrameError::DataTooLong(len));
    }
    let mut payload = vec![0u8; len as usize];
    reader.read_exact(&mut payload).await?;
    Ok(Some(Frame::Data(payload)))
}

/// The next frame, which must be the control frame `expected`.
async fn expect<R: AsyncRead + Unpin>(
    reader: &mut R,
    expected: ControlKind,
) -> Result<Control, FrameError> {
    match read_frame(reader).await? {
        Some(Frame::Control(c)) if c.kind == expected => Ok(c),
        Some(Frame::Control(c)) => Err(FrameError::Unexpected {
            expected,
            got: c.kind,
        }),
        Some(Frame::Data(_)) => Err(FrameError::DataBeforeStart),
        None => Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into()),
    }
}

/// The reader's side of the handshake: READY offering dnstap, answered by ACCEPT; then START.
pub async fn accept<S: AsyncRead + AsyncWrite + Unpin>(stream: &mut S) -> Result<(), FrameError> {
    let ready = expect(stream, ControlKind::Ready).await?;
    if !ready.content_types.iter().any(|ct| ct == CONTENT_TYPE) {
        return Err(FrameError::ContentType);
    }
    stream
        .write_all(&encode_control(ControlKind::Accept, &[CONTENT_TYPE]))
        .await?;
    let start = expect(stream, ControlKind::Start).await?;
    if !start.content_types.is_empty() && !start.content_types.iter().any(|ct| ct == CONTENT_TYPE) {
        return Err(FrameError::ContentType);
    }
    Ok(())
}

/// The writer's side of the handshake: READY offering dnstap, the reader's ACCEPT (which must
/// name it), then START.
pub async fn offer<S: AsyncRead + AsyncWrite + Unpin>(stream: &mut S) -> Result<(), FrameError> {
    stream
        .write_all(&encode_control(ControlKind::Ready, &[CONTENT_TYPE]))
        .await?;
    let accept = expect(stream, ControlKind::Accept).await?;
    if !accept.content_types.iter().any(|ct| ct == CONTENT_TYPE) {
        return Err(FrameError::ContentType);
    }
    stream
        .write_all(&encode_control(ControlKind::Start, &[CONTENT_TYPE]))
        .await?;
    stream.flush().await?;
    Ok(())
}

/// The writer's end: STOP, answered by the reader's FINISH.
pub async fn stop<S: AsyncRead + AsyncWrite + Unpin>(stream: &mut S) -> Result<(), FrameError> {
    stream
        .write_all(&encode_control(ControlKind::Stop, &[]))
        .await?;
    stream.flush().await?;
    expect(stream, ControlKind::Finish).await.map(drop)
}

/// The answer to the writer's STOP.
pub async fn finish<W: AsyncWrite + Unpin>(writer: &mut W) -> Result<(), FrameError> {
    writer
        .write_all(&encode_control(ControlKind::Finish, &[]))
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_frames_round_trip() {
        let frame = encode_control(ControlKind::Ready, &[CONTENT_TYPE, b"other"]);
        assert_eq!(&frame[..4], &[0, 0, 0, 0]);
        let parsed = parse_control(&frame[8..]).expect("parses");
        assert_eq!(parsed.kind, ControlKind::Ready);
        assert_eq!(
            parsed.content_types,
            vec![CONTENT_TYPE.to_vec(), b"other".to_vec()]
        );
    }

    #[test]
    fn malformed_control_frames_are_refused() {
        for payload in [
            &b""[..],
            &[0, 0, 0, 9][..],
            &[0, 0, 0, 4, 0, 0, 0, 1, 0, 0, 0, 9, b'x'][..],
            &[0, 0, 0, 4, 0, 0][..],
        ] {
            assert!(parse_control(payload).is_err(), "{payload:?}");
        }
    }

    #[tokio::test]
    async fn handshake_then_data_then_stop() {
        let (mut writer, mut reader) = tokio::io::duplex(4096);
        let writer_side = tokio::spawn(async move {
            writer
                .write_all(&encode_control(ControlKind::Ready, &[CONTENT_TYPE]))
                .await
                .unwrap();
            let accept = read_frame(&mut writer).await.unwrap().unwrap();
            assert_eq!(
                accept,
                Frame::Control(Control {
                    kind: ControlKind::Accept,
                    content_types: vec![CONTENT_TYPE.to_vec()]
                })
            );
            writer
                .write_all(&encode_control(ControlKind::Start, &[CONTENT_TYPE]))
                .await
                .unwrap();
            writer.write_all(&encode_data(b"one")).await.unwrap();
            writer
                .write_all(&encode_control(ControlKind::Stop, &[]))
                .await
                .unwrap();
            let finish = read_frame(&mut writer).await.unwrap().unwrap();
            assert!(matches!(finish, Frame::Control(c) if c.kind == ControlKind::Finish));
        });
        accept(&mut reader).await.expect("handshake");
        assert_eq!(
            read_frame(&mut reader).await.unwrap(),
            Some(Frame::Data(b"one".to_vec()))
        );
        assert!(matches!(
            read_frame(&mut reader).await.unwrap(),
            Some(Frame::Control(c)) if c.kind == ControlKind::Stop
        ));
        finish(&mut reader).await.unwrap();
        writer_side.await.unwrap();
    }

    #[tokio::test]
    async fn the_writers_side_meets_the_readers() {
        let (mut writer, mut reader) = tokio::io::duplex(4096);
        let reader_side = tokio::spawn(async move {
            accept(&mut reader).await.expect("handshake");
            assert_eq!(
                read_frame(&mut reader).await.unwrap(),
                Some(Frame::Data(b"two".to_vec()))
            );
            assert!(matches!(
                read_frame(&mut reader).await.unwrap(),
                Some(Frame::Control(c)) if c.kind == ControlKind::Stop
            ));
            finish(&mut reader).await.unwrap();
        });
        offer(&mut writer).await.expect("handshake");
        writer.write_all(&encode_data(b"two")).await.unwrap();
        stop(&mut writer).await.expect("finished");
        reader_side.await.unwrap();
    }

    #[tokio::test]
    async fn a_reader_accepting_another_content_type_is_refused() {
        let (mut writer, mut reader) = tokio::io::duplex(4096);
        reader
            .write_all(&encode_control(ControlKind::Accept, &[b"protobuf:other"]))
            .await
            .unwrap();
        assert!(matches!(
            offer(&mut writer).await,
            Err(FrameError::ContentType)
        ));
    }

    #[tokio::test]
    async fn oversize_frames_end_the_stream() {
        let (mut writer, mut reader) = tokio::io::duplex(64);
        writer
            .write_all(&(DATA_MAX + 1).to_be_bytes())
            .await
            .unwrap();
        assert!(matches!(
            read_frame(&mut reader).await,
            Err(FrameError::DataTooLong(_))
        ));
        writer.write_all(&[0, 0, 0, 0, 0, 0, 2, 1]).await.unwrap();
        assert!(matches!(
            read_frame(&mut reader).await,
            Err(FrameError::ControlTooLong(_))
        ));
    }

    #[tokio::test]
    async fn a_writer_without_dnstap_is_refused() {
        let (mut writer, mut reader) = tokio::io::duplex(4096);
        writer
            .write_all(&encode_control(ControlKind::Ready, &[b"protobuf:other"]))
            .await
            .unwrap();
        assert!(matches!(
            accept(&mut reader).await,
            Err(FrameError::ContentType)
        ));
    }
}
