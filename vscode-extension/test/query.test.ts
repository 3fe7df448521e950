// The filter prefixes of Search Project (src/query.ts) and the files.exclude check.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { hidesIndex } from '../src/excludeHint';
import { buildSearchParams } from '../src/protocol';
import { chapterNumber, describeFilter, parseQuery } from '../src/query';

describe('parseQuery', () => {
  it('takes the prefixes out of the query, wherever they stand', () => {
    assert.deepEqual(parseQuery('upto:12 type:character the sister'), {
      query: 'the sister',
      filter: { maxChapter: 12, entityTypes: ['character'] },
      errors: [],
    });
    assert.deepEqual(parseQuery('where is book:book-2 the map path:notes/ kept').filter, {
      bookId: 'book-2',
      pathPrefix: 'notes/',
    });
    assert.equal(parseQuery('where is book:book-2 the map path:notes/ kept').query, 'where is the map kept');
  });

  it('accepts several types, quoted values and chapter ids', () => {
    const parsed = parseQuery('type:character,world type:location path:"my notes/" upto:ch-07 storm');
    assert.deepEqual(parsed.filter, {
      entityTypes: ['character', 'world', 'location'],
      pathPrefix: 'my notes/',
      maxChapter: 7,
    });
    assert.equal(parsed.query, 'storm');
  });

  it('leaves other words with colons alone and is case-insensitive on keys', () => {
    const parsed = parseQuery('Note: the time 10:30 UPTO:3');
    assert.equal(parsed.query, 'Note: the time 10:30');
    assert.deepEqual(parsed.filter, { maxChapter: 3 });
  });

  it('reports a bad or empty value instead of searching with it', () => {
    assert.match(parseQuery('upto:soon sister').errors[0], /upto: needs a chapter number, not "soon"/);
    assert.match(parseQuery('book: sister').errors[0], /book: needs a value/);
  });

  it('builds the filter the server reads', () => {
    const parsed = parseQuery('upto:12 type:character the sister');
    assert.deepEqual(buildSearchParams(parsed.query, { filter: parsed.filter })?.filter, {
      maxChapter: 12,
      entityTypes: ['character'],
    });
    assert.equal(buildSearchParams(parseQuery('type:character').query, { filter: parsed.filter }), undefined);
  });

  it('describes the active filters', () => {
    assert.equal(describeFilter(parseQuery('book:b1 type:character upto:12 path:notes/ x').filter),
      'book b1 · type character · up to chapter 12 · in notes/');
    assert.equal(describeFilter({}), '');
  });

  it('reads chapter numbers', () => {
    assert.equal(chapterNumber('12'), 12);
    assert.equal(chapterNumber('chapter-3'), 3);
    assert.equal(chapterNumber('ch12'), 12);
    assert.equal(chapterNumber('twelve'), undefined);
  });
});

describe('hidesIndex', () => {
  it('recognises the patterns that hide .saipling', () => {
    assert.equal(hidesIndex({ '**/.saipling': true }), true);
    assert.equal(hidesIndex({ '.saipling': true, '**/.git': true }), true);
    assert.equal(hidesIndex({ '**/.saipling': false }), false);
    assert.equal(hidesIndex({ '**/.git': true }), false);
    assert.equal(hidesIndex(undefined), false);
  });
});
