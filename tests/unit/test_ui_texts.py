from tts_app.ui.texts import EN, SERVER, ZH, pick_language, server_text


def test_every_interface_string_exists_in_both_languages():
    assert EN.keys() == ZH.keys() and SERVER["en"].keys() == SERVER["zh"].keys()


def test_language_follows_lang_flag_then_browser_then_english():
    assert pick_language("en", "zh-CN,zh;q=0.9") == "en"
    assert pick_language(None, "zh-TW,zh;q=0.9,en;q=0.5") == "zh"
    assert pick_language(None, "fr-FR,fr;q=0.9,en;q=0.5") == "en"
    assert pick_language(None, None) == "en"
    assert server_text("zh", "job_progress", done=2, total=5, cap=4) == "已完成 2/5 行 · 批大小上限 4"
