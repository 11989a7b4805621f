//! HostBuffer's copies from several threads at once: the buffer is shared through `&self` once
//! registered, so its copies must neither race (word-atomic, `src/shared_bytes.rs`) nor lose a
//! neighbour's bytes when they update part of a word.
use pdkv::HostBuffer;
use std::sync::{Arc, Barrier};
use std::thread;

// Eight threads each own every eighth byte and write them one at a time, released together by
// a barrier and walking the words in the same order, so every write updates part of a word the
// other threads write at about the same moment: a copy that read the word, changed its byte and
// stored it back unsynchronised would lose their bytes (it does, within a few rounds).
#[test]
fn threads_writing_neighbouring_bytes_of_one_word_keep_each_others_bytes() {
    const THREADS: usize = 8;
    const LEN: usize = 1 << 16;
    let buf = Arc::new(HostBuffer::new(LEN).unwrap());
    for round in 1..=30u8 {
        let start = Arc::new(Barrier::new(THREADS));
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let buf = Arc::clone(&buf);
                let start = Arc::clone(&start);
                thread::spawn(move || {
                    start.wait();
                    let v = round.wrapping_mul(31).wrapping_add(t as u8);
                    for i in (t..LEN).step_by(THREADS) {
                        buf.write_at(i, &[v]).unwrap();
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        let got = buf.to_vec();
        for (i, b) in got.iter().enumerate() {
            let want = round.wrapping_mul(31).wrapping_add((i % THREADS) as u8);
            assert_eq!(*b, want, "round {round}: byte {i}");
        }
    }
}

// Writers of whole, overlapping ranges at odd offsets and a reader at the same time: every byte
// read, and every byte left, is one of the values written (or the initial zero).
#[test]
fn overlapping_writers_and_a_reader_see_only_written_values() {
    const LEN: usize = 1000;
    let buf = Arc::new(HostBuffer::new(LEN).unwrap());
    let writers: Vec<_> = (1..=4u8)
        .map(|v| {
            let buf = Arc::clone(&buf);
            thread::spawn(move || {
                let src = vec![v; LEN - 3];
                for _ in 0..200 {
                    buf.write_at(usize::from(v) % 3, &src[..LEN - 3]).unwrap();
                }
            })
        })
        .collect();
    let reader = {
        let buf = Arc::clone(&buf);
        thread::spawn(move || {
            let mut dst = vec![0u8; LEN - 5];
            for _ in 0..200 {
                buf.read_at(5, &mut dst).unwrap();
                assert!(dst.iter().all(|b| *b <= 4), "a byte no one wrote");
            }
        })
    };
    for h in writers {
        h.join().unwrap();
    }
    reader.join().unwrap();
    assert!(buf.to_vec().iter().all(|b| *b <= 4));
}

// Lengths that are not whole words: the last word is allocated, so copies reaching the last
// byte work and the bytes stay exact.
#[test]
fn buffers_of_any_length_copy_exactly_to_their_last_byte() {
    for len in 1..=33usize {
        let buf = HostBuffer::new(len).unwrap();
        let src: Vec<u8> = (0..len).map(|i| i as u8 ^ 0x5a).collect();
        buf.write_at(0, &src).unwrap();
        assert_eq!(buf.to_vec(), src);
        let mut last = [0u8; 1];
        buf.read_at(len - 1, &mut last).unwrap();
        assert_eq!(last[0], src[len - 1]);
        assert!(buf.write_at(len, &[1]).is_err());
    }
}
