"""Mention precision and recall on a labelled set (issue 35 target: >= 0.98 each): lines in the manner of
Dracula, each with the mentions a careful reader counts (entity, as written), covering aliases, possessives
(`'s`, `'`), case (`MINA`, not `rose` for Rose), longest names, and names inside other words, code, URLs or
frontmatter that must not count. Scored through the index (the stored mentions), per (file, line, entity)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from fixtures import FICTION_CORPUS, make_project, open_project

PROFILES = {
    "characters/mina.md": ("Mina Harker", ["Mina", "Madam Mina", "Mina Murray"]),
    "characters/jonathan.md": ("Jonathan Harker", ["Jonathan"]),
    "characters/dracula.md": ("Count Dracula", ["Dracula", "the Count"]),
    "characters/van-helsing.md": ("Abraham Van Helsing", ["Van Helsing", "the Professor"]),
    "characters/lucy.md": ("Lucy Westenra", ["Lucy"]),
    "characters/rose.md": ("Rose", []),
    "characters/will.md": ("Will", []),
}
M, J, D, V, L, R, W = (
    f"characters/{n}.md" for n in ("mina", "jonathan", "dracula", "van-helsing", "lucy", "rose", "will")
)

# (line, the entities mentioned on it, one per mention)
LABELLED: list[tuple[str, list[str]]] = [
    ("Mina wrote in her journal by the window.", [M]),
    ("Mina's journal lay open on the table.", [M]),
    ("MINA, he cried, come quickly!", [M]),
    ("Madam Mina slept while the men talked.", [M]),
    ("A letter from Mina Murray to Lucy Westenra.", [M, L]),
    ("Mina Harker's courage never failed.", [M]),
    ("They called her Minakshi in that country.", []),
    ("The Minas Gerais is a province far away.", []),
    ("Jonathan kept his diary in shorthand.", [J]),
    ("Jonathan's hand shook as he wrote.", [J]),
    ("JONATHAN HARKER'S JOURNAL", [J]),
    ("Jonathan Harker and Mina Harker were married at Buda-Pesth.", [J, M]),
    ("Jonathanson was a sailor of Whitby.", []),
    ("The Count came down the stair with a lamp.", [D]),
    ("I saw the Count's face in the glass; there was no reflection.", [D]),
    ("Dracula is a name of ill omen in that land.", [D]),
    ("Count Dracula bowed, and bade me welcome.", [D]),
    ("The count of the boxes was fifty.", []),
    ("He could count the stones on the path.", []),
    ("Draculas and wolves, said the driver.", []),
    ("Dr. Van Helsing arrived from Amsterdam.", [V]),
    ("Van Helsing's bag held garlic and a crucifix.", [V]),
    ("Abraham Van Helsing, M.D., D.Ph., D.Lit., etc.", [V]),
    ("The Professor shook his head gravely.", [V]),
    ("the Professor said nothing more that night.", [V]),
    ("a professor of medicine came from the university.", []),
    ("Lucy walked in her sleep to the churchyard.", [L]),
    ("Lucy's mother died that night.", [L]),
    ("Poor LUCY, we said, and wept.", [L]),
    ("Lucy Westenra's grave was empty.", [L]),
    ("Lucyfer was the name of a ship.", []),
    ("Rose came to the door with a candle.", [R]),
    ("The sun rose over the sea.", []),
    ("A rose lay on the pillow.", []),
    ("Rose's letter arrived late.", [R]),
    ("Will said he would go alone.", [W]),
    ("I will go alone, he said.", []),
    ("Free will is no answer to the thing.", []),
    ("Mina, Lucy and Jonathan sat together.", [M, L, J]),
    ("The Count saw Mina; Mina did not see the Count.", [D, M, M, D]),
    ("Jonathan's and Mina's letters crossed.", [J, M]),
    ("He wrote the names: Lucy, Mina, Lucy again.", [L, M, L]),
    ("The Professors' meeting was called for noon.", []),
    ("The word `Mina` in code is not a mention.", []),
    ("Lucy-like, she smiled.", [L]),
    ("(Mina) was written in the margin.", [M]),
    ('"Jonathan!" she called.', [J]),
    ("Mina Harker.", [M]),
    ("Dracula's castle stood on the crag.", [D]),
    ("The Countess was a different person.", []),
    ("Van Helsings are numerous in Holland.", []),
    ("Vanhelsing is misspelt here.", []),
    ("Lucyy is a typo, not a mention.", []),
    ("Minas is the plural of nothing.", []),
    ("Jonathan' was how the old man wrote it.", [J]),
    ("Count Dracula's shadow fell on Jonathan.", [D, J]),
    ("Madam Mina's eyes were red.", [M]),
    ("The Professor's notes, Jonathan's diary and Mina's typescript.", [V, J, M]),
    ("Will Rose come? asked Lucy.", [W, R, L]),
]


def test_precision_and_recall_of_stored_mentions_on_the_labelled_lines(tmp_path: Path) -> None:
    files: dict[str, str] = {}
    for path, (name, aliases) in PROFILES.items():
        files[path] = f"---\nname: {name}\naliases: [{', '.join(aliases)}]\ntype: character\n---\nA character.\n"
    body = "\n\n".join(line for line, _ in LABELLED)
    fence = "\n\n```\nMina and Jonathan in a code block\n```\n\n    Lucy in an indented code block\n"
    front = "---\ntitle: Mina and Lucy\npov: Mina\n---\n"
    files["books/book-01/ch-01/scene-01.md"] = front + "# Chapter\n\n" + body + fence
    root = make_project(tmp_path, files)
    with open_project(root) as p:
        p.index()
        rows = p.store.mentions_of(list(PROFILES))
    first_body_line = front.count("\n") + 2  # 0-based line of LABELLED[0]
    expected = Counter((first_body_line + 2 * i, e) for i, (_, ents) in enumerate(LABELLED) for e in ents)
    found = Counter((r.line, r.entity) for r in rows if r.path.startswith("books/"))
    true_pos = sum((expected & found).values())
    precision = true_pos / max(1, sum(found.values()))
    recall = true_pos / sum(expected.values())
    assert sum(expected.values()) >= 50
    assert precision >= 0.98 and recall >= 0.98, (precision, recall, found - expected, expected - found)


# -- Dracula, six chapters read by hand (the corpus is read at test time, never copied) ----------------------
DRACULA_CAST = [
    ("mina", "Mina Harker", ("Mina", "Mina Murray", "Madam Mina")),
    ("jon", "Jonathan Harker", ("Jonathan",)),
    ("lucy", "Lucy Westenra", ("Lucy",)),
    ("vh", "Abraham Van Helsing", ("Van Helsing", "the Professor")),
    ("drac", "Count Dracula", ("Dracula", "the Count")),
    ("art", "Arthur Holmwood", ("Arthur",)),
]
# Every case-insensitive occurrence of a word of these names (and of Art, Holmwood, Godalming, Westenra, Murray)
# in the six chapters was read in context: these are the mentions a reader counts that the names cover, as
# "line:column:entity" (0-based line, start column of the mention). 301 mentions.
# ("Castle Dracula" in chapter 25 names the castle, not the Count: it is not in the list.)
DRACULA_CHECKED = {
    # chapters 3 and 4 (Jonathan at the castle): "Castle Dracula" (4, 92:548) and the clan in "we of the Dracula
    # blood", "the Dracula as their heart's blood" (3, 20:2679 and 20:2811) are not the Count; "This was a Dracula
    # indeed!" and "this Dracula, indeed" (3, 20:1927, 20:2091) are the Voivode, whom the book reveals as the Count
    "03-chapter-3.md": (
        "11:0:jon 13:705:drac 15:91:drac 15:640:drac 15:1602:drac 18:40:drac 20:1927:drac 20:2091:drac "
        "24:249:drac 24:553:drac 44:135:drac 44:303:drac 46:698:mina 46:762:drac 46:860:drac 48:443:drac "
        "56:1163:drac 58:15:drac 62:32:drac 62:829:drac 62:3167:drac 64:367:drac 73:0:drac 75:105:drac "
        "77:578:drac 77:1297:mina 85:114:drac 85:430:drac 89:226:drac "
    ),
    "04-chapter-4.md": (
        "11:2:jon 13:55:drac 13:670:drac 17:47:drac 17:468:drac 26:28:mina 26:304:drac 28:295:drac 30:0:drac "
        "36:28:drac 49:38:drac 49:226:drac 51:93:drac 55:28:drac 59:64:drac 67:69:drac 79:131:drac 80:436:mina "
        "80:532:mina 82:673:drac 82:1070:drac 86:102:drac 86:870:drac 88:53:drac 90:18:drac 104:0:drac "
        "114:252:drac 114:391:drac 114:623:drac 116:157:drac 118:106:drac 120:171:drac 129:208:drac "
        "131:124:drac 131:303:drac 133:342:drac 133:1239:drac 135:334:drac 135:470:drac 143:56:mina "
        "149:150:mina "
    ),
    "05-chapter-5.md": (
        "11:19:mina 11:39:lucy 14:12:lucy 16:324:jon 16:451:jon 16:1073:jon 16:1518:jon 16:1699:jon 19:1:mina "
        "24:10:lucy 24:27:mina 29:12:mina 31:708:jon 31:1804:art 31:1854:mina 31:2065:mina 31:2203:mina "
        "31:2626:mina 31:2688:mina 33:1:lucy 40:10:lucy 40:27:mina 44:12:mina 48:336:mina 48:676:mina "
        "48:900:jon 48:986:art 48:1760:mina 48:2434:mina 48:2729:mina 52:1:art 52:699:art 52:874:art "
        "52:1519:art 54:8:lucy 56:526:mina 58:3:lucy 60:9:mina 64:799:mina 70:1:lucy 89:36:art 102:16:art "
    ),
    "13-chapter-13.md": (
        "13:62:lucy 17:15:vh 17:160:art 17:317:vh 17:412:lucy 21:74:lucy 23:166:lucy 25:303:vh 37:42:lucy "
        "37:313:vh 37:474:lucy 39:0:vh 47:497:art 53:595:art 57:281:lucy 60:67:vh 74:446:lucy 74:606:art "
        "80:240:art 80:568:vh 80:941:art 82:326:vh 82:433:vh 94:199:art 100:41:vh 100:253:art 104:92:vh "
        "106:14:art 110:0:vh 112:136:art 114:0:art 116:355:vh 122:33:art 124:0:vh 134:121:lucy 134:630:lucy "
        "136:0:art 138:5:vh 144:21:art 144:47:vh 144:178:lucy 146:1:mina 148:40:jon 150:124:jon 150:178:jon "
        "150:188:jon 150:284:jon 152:249:jon 154:65:jon 154:340:jon 154:604:jon 154:842:jon 154:957:jon "
        "156:496:jon 156:631:jon 158:150:mina 162:418:jon 164:17:drac 164:527:jon 166:6:mina 166:550:jon "
        "168:96:jon 168:188:vh 170:77:lucy 172:69:lucy 172:125:art 177:32:art 177:195:lucy 177:360:vh "
        "177:922:art 177:1033:lucy 177:1059:vh 177:1110:art 177:1313:art 177:1371:vh 201:110:lucy "
    ),
    "21-chapter-21.md": (
        "21:11:vh 21:147:vh 25:109:vh 29:115:vh 31:210:vh 33:410:art 35:30:vh 39:22:vh 41:112:vh 43:124:vh "
        "49:339:vh 53:13:vh 59:698:vh 61:524:vh 65:219:vh 71:241:vh 75:167:vh 79:1165:vh 81:377:drac "
        "81:396:vh 83:171:mina 91:16:vh 95:0:vh 97:164:vh 99:131:jon 99:423:drac 99:968:drac 99:1449:vh "
        "99:1559:drac 99:1600:lucy 99:2021:vh 99:2615:drac 99:2771:vh 99:2931:vh 101:1:jon 101:94:mina "
        "103:72:vh 103:131:mina 103:543:vh 103:565:mina 105:9:jon 107:0:vh 107:43:vh 113:11:mina 115:268:drac "
        "115:680:vh 117:224:vh 119:15:art 123:142:vh 127:125:drac 129:185:vh 131:10:mina 131:38:mina "
        "133:227:vh 135:777:jon 135:1140:jon 135:1929:jon 135:2131:jon "
    ),
    "25-chapter-25.md": (
        "13:23:jon 21:26:vh 23:225:lucy 37:27:mina 37:45:vh 43:668:vh 43:721:lucy 45:22:vh 66:1:jon "
        "68:573:mina 68:824:vh 74:161:vh 74:249:drac 74:624:lucy 76:14:mina 78:71:drac 78:705:drac 78:725:vh "
        "78:929:vh 78:972:drac 80:114:mina 92:88:vh 92:796:vh 92:1015:vh 96:411:drac 98:0:vh 100:239:drac "
        "104:283:vh 104:351:drac 106:33:mina 116:799:vh 116:1640:vh 122:47:jon 122:77:vh 124:28:vh 126:48:vh "
        "126:315:art 126:433:jon 126:772:mina 128:397:vh 130:47:vh 140:187:mina 140:310:drac 142:449:mina "
        "142:730:drac 144:15:vh 144:93:lucy 144:374:vh 146:75:mina 146:651:jon 150:39:drac 150:735:mina "
        "154:1:drac 156:43:vh 166:642:vh "
    ),
}
# mentions a reader counts that no name or alias covers ("The old Professor", "Professor," said to him,
# "Lord Godalming", "Art"): what recall is against a reader rather than the rule
DRACULA_READER_ONLY = 4


@pytest.mark.skipif(not (FICTION_CORPUS / "bram-stoker" / "dracula").is_dir(), reason="no fiction corpus")
def test_precision_and_recall_on_six_hand_checked_chapters_of_dracula() -> None:
    from saipling.retrieval.entities import Entity, EntityIndex

    index = EntityIndex.build(Entity(slug, name, "character", aliases) for slug, name, aliases in DRACULA_CAST)
    expected = {f"{f}:{item}" for f, items in DRACULA_CHECKED.items() for item in items.split()}
    found = set()
    for f in DRACULA_CHECKED:
        text = (FICTION_CORPUS / "bram-stoker" / "dracula" / f).read_text(encoding="utf-8")
        found |= {f"{f}:{m.line}:{m.start}:{e.path}" for m in index.mentions(text) for e in m.entities}
    assert len(expected) >= 300
    precision = len(found & expected) / len(found)
    recall = len(found & expected) / len(expected)
    reader_recall = len(found & expected) / (len(expected) + DRACULA_READER_ONLY)
    print(
        f"Dracula, {len(expected)} hand-checked mentions: precision {precision:.3f} recall {recall:.3f} "
        f"against a reader {reader_recall:.3f} ({len(found - expected)} false, {len(expected - found)} missed)"
    )
    assert precision >= 0.98 and recall >= 0.98 and reader_recall >= 0.98, (precision, recall, reader_recall)
